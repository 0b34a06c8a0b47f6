// Megatron-LM and vLLM layouts of a ModelPreset, built with core/layout's builders.
#include "tools/models/framework_layouts.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <numeric>
#include <set>
#include <utility>

#include "core/base/strings.h"
#include "core/layout/builders.h"

namespace ferry::models {

namespace {

constexpr int64_t kMegatronVocabPad = 128;  // Megatron's --make-vocab-size-divisible-by default
constexpr int64_t kVllmVocabPad = 64;       // vLLM's DEFAULT_VOCAB_PADDING_SIZE

Status NotDivisible(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  return InvalidArgument(what + " " + std::to_string(n) + " is not divisible by " + by_what + " " +
                         std::to_string(by));
}

Status CheckDivides(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  if (by <= 0 || n % by != 0) return NotDivisible(what, n, by_what, by);
  return Status::Ok();
}

// The rows [lo, hi) of `t` (all of its other dims).
Box Rows(const TensorSpec& t, int64_t lo, int64_t hi) {
  Box b = Box::FromShape(t.shape);
  b.lo[0] = lo;
  b.hi[0] = hi;
  return b;
}

// Shard `index` of `parts` equal row blocks of rows [offset, offset + extent).
Box RowShard(const TensorSpec& t, int64_t offset, int64_t extent, int64_t parts, int64_t index) {
  const int64_t size = extent / parts;
  return Rows(t, offset + index * size, offset + (index + 1) * size);
}

std::string Num(int64_t v) { return std::to_string(v); }

// The buffers and fragments appended to a layout between two points of construction.
struct Section {
  size_t buffers_begin = 0, buffers_end = 0;
  size_t fragments_begin = 0, fragments_end = 0;
};

Section Begin(const Layout& l) { return {l.buffers.size(), 0, l.fragments.size(), 0}; }
void End(const Layout& l, Section& s) {
  s.buffers_end = l.buffers.size();
  s.fragments_end = l.fragments.size();
}

// Replicas: appends, for each shift, a copy of the section's buffers and fragments on rank + shift.
// Copies instead of re-running the builders, which keeps a 1024-rank layout well under a second.
// The section's fragments must lie in the section's own buffers.
Status CloneSection(Layout& l, const Section& s, const std::vector<int>& shifts) {
  const size_t nb = s.buffers_end - s.buffers_begin;
  const size_t nf = s.fragments_end - s.fragments_begin;
  for (size_t f = s.fragments_begin; f < s.fragments_end; ++f) {
    const size_t b = static_cast<size_t>(l.fragments[f].loc.buffer);
    if (b < s.buffers_begin || b >= s.buffers_end) {
      return Internal("replicated section has a fragment in buffer '" + l.buffers[b].name +
                      "' created outside it");
    }
  }
  l.buffers.reserve(l.buffers.size() + nb * shifts.size());
  l.fragments.reserve(l.fragments.size() + nf * shifts.size());
  for (int shift : shifts) {
    const int buffer_delta = static_cast<int>(l.buffers.size() - s.buffers_begin);
    for (size_t b = s.buffers_begin; b < s.buffers_end; ++b) {
      BufferSpec copy = l.buffers[b];
      copy.rank += shift;
      l.buffers.push_back(std::move(copy));
    }
    for (size_t f = s.fragments_begin; f < s.fragments_end; ++f) {
      Fragment copy = l.fragments[f];
      copy.loc.rank += shift;
      copy.loc.buffer += buffer_delta;
      l.fragments.push_back(copy);
    }
  }
  return Status::Ok();
}

std::vector<int> Shifts(int count, int step) {
  std::vector<int> out;
  for (int i = 1; i < count; ++i) out.push_back(i * step);
  return out;
}

// Shared machinery of both frameworks: tensor lookup and the fused pieces common to them.
class LayoutWriter {
 public:
  LayoutWriter(const ModelPreset& preset, bool stack_experts, Layout& out)
      : preset_(preset), c_(preset.config()), out_(out), stack_experts_(stack_experts) {}

 protected:
  // Adds the tensor stacks of layer `l`'s routed experts (gate, up, down: [E, ...member shape],
  // checked against the preset's expert tensors) and returns their indexes.
  Result<std::array<int, 3>> AddExpertStacks(int64_t l) {
    std::array<int, 3> ids{};
    const char* projs[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int j = 0; j < 3; ++j) {
      FERRY_ASSIGN_OR_RETURN(const TensorSpec* member, Get(ExpertTensorName(c_, l, 0, projs[j])));
      TensorSpec stack{ExpertStackName(c_, l, projs[j]), {c_.num_experts}, member->dtype};
      stack.shape.insert(stack.shape.end(), member->shape.begin(), member->shape.end());
      FERRY_ASSIGN_OR_RETURN(ids[j], out_.AddTensor(stack));
    }
    return ids;
  }

  Result<const TensorSpec*> Get(const std::string& name) const {
    const TensorSpec* t = preset_.Find(name);
    if (t == nullptr) return Internal("model '" + c_.name + "' has no tensor '" + name + "'");
    return t;
  }
  Result<const TensorSpec*> LayerTensor(int64_t layer, const std::string& suffix) const {
    return Get(LayerTensorName(c_, layer, suffix));
  }

  Status Replicated(const std::string& hf_name, const std::vector<int>& ranks,
                    const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
    return AddReplicated(out_, *t, ranks, buffer);
  }
  Status Column(const std::string& hf_name, const std::vector<int>& tp_ranks,
                const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
    return AddColumnParallel(out_, *t, tp_ranks, buffer);
  }
  Status Row(const std::string& hf_name, const std::vector<int>& tp_ranks, const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
    return AddRowParallel(out_, *t, tp_ranks, buffer);
  }
  Status Vocab(const std::string& hf_name, const std::vector<int>& tp_ranks, int64_t pad,
               const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
    return AddVocabParallel(out_, *t, tp_ranks, pad, buffer);
  }

  // [gate shard i; up shard i] per rank of `tp_ranks`, at `base_offset` of each rank's buffer.
  Status GateUp(const std::string& gate_name, const std::string& up_name,
                const std::vector<int>& tp_ranks, const std::string& buffer,
                int64_t base_offset = 0) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* gate, Get(gate_name));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* up, Get(up_name));
    const int64_t tp = static_cast<int64_t>(tp_ranks.size());
    for (int64_t i = 0; i < tp; ++i) {
      FERRY_RETURN_IF_ERROR(AddFusedConcat(
          out_, tp_ranks[i], buffer,
          {{*gate, RowShard(*gate, 0, gate->shape[0], tp, i)},
           {*up, RowShard(*up, 0, up->shape[0], tp, i)}},
          0, base_offset));
    }
    return Status::Ok();
  }

  // Mamba-2 mixer sharded over TP the way Megatron's and vLLM's MambaMixer do: in_proj per rank is
  // [z_i; x_i; B_i; C_i; dt_i], conv1d per rank [x_i; B_i; C_i]; per-head vectors and the gated
  // norm split over heads / channels; out_proj row-parallel. `name` maps a mixer suffix (e.g.
  // "in_proj.weight") to the framework's buffer name.
  template <typename NameFn>
  Status MambaMixer(int64_t layer, const std::vector<int>& tp_ranks, NameFn name,
                    const std::string& a_log_buffer_suffix) {
    const int64_t tp = static_cast<int64_t>(tp_ranks.size());
    const int64_t di = c_.MambaInner();
    const int64_t gs = c_.mamba_groups * c_.ssm_state_size;
    const int64_t nh = c_.mamba_num_heads;
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* in_proj, LayerTensor(layer, "mixer.in_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* conv_w, LayerTensor(layer, "mixer.conv1d.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* conv_b, LayerTensor(layer, "mixer.conv1d.bias"));
    for (int64_t i = 0; i < tp; ++i) {
      const int rank = tp_ranks[i];
      FERRY_RETURN_IF_ERROR(AddFusedConcat(out_, rank, name("in_proj.weight"),
                                           {{*in_proj, RowShard(*in_proj, 0, di, tp, i)},
                                            {*in_proj, RowShard(*in_proj, di, di, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di, gs, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di + gs, gs, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di + 2 * gs, nh, tp, i)}},
                                           0));
      for (const TensorSpec* conv : {conv_w, conv_b}) {
        const std::string suffix = conv == conv_w ? "conv1d.weight" : "conv1d.bias";
        FERRY_RETURN_IF_ERROR(AddFusedConcat(out_, rank, name(suffix),
                                             {{*conv, RowShard(*conv, 0, di, tp, i)},
                                              {*conv, RowShard(*conv, di, gs, tp, i)},
                                              {*conv, RowShard(*conv, di + gs, gs, tp, i)}},
                                             0));
      }
    }
    FERRY_RETURN_IF_ERROR(Column(LayerTensorName(c_, layer, "mixer.A_log"), tp_ranks,
                                 name(a_log_buffer_suffix)));
    FERRY_RETURN_IF_ERROR(Column(LayerTensorName(c_, layer, "mixer.D"), tp_ranks, name("D")));
    FERRY_RETURN_IF_ERROR(
        Column(LayerTensorName(c_, layer, "mixer.dt_bias"), tp_ranks, name("dt_bias")));
    FERRY_RETURN_IF_ERROR(
        Column(LayerTensorName(c_, layer, "mixer.norm.weight"), tp_ranks, name("norm.weight")));
    return Row(LayerTensorName(c_, layer, "mixer.out_proj.weight"), tp_ranks,
               name("out_proj.weight"));
  }

  std::string H(int64_t layer, const std::string& suffix) const {
    return LayerTensorName(c_, layer, suffix);
  }
  std::string EmbeddingName() const {
    return c_.family == ModelFamily::kNemotronH ? "backbone.embeddings.weight"
                                                : "model.embed_tokens.weight";
  }
  std::string FinalNormName() const {
    return c_.family == ModelFamily::kNemotronH ? "backbone.norm_f.weight" : "model.norm.weight";
  }
  std::string OutputName() const { return c_.tie_embeddings ? EmbeddingName() : "lm_head.weight"; }

  const ModelPreset& preset_;
  const ModelConfig& c_;
  Layout& out_;
  bool stack_experts_;  // routed experts as tensor stacks (FrameworkSpec::stack_expert_tensors)
};

// ---------------------------------------------------------------------------------------------
// Megatron-LM

class MegatronWriter : public LayoutWriter {
 public:
  MegatronWriter(const ModelPreset& preset, const MegatronParallel& m, bool stack_experts,
                 int first_rank, Layout& out)
      : LayoutWriter(preset, stack_experts, out), m_(m), first_(first_rank) {
    stage_size_ = m.tp * m.cp * m.dp;
    edp_ = stage_size_ / (m.ep * m.etp);
  }

  // Builds DP/CP replica 0 of the dense weights and expert-DP replica 0 of the experts with the
  // builders, then copies them to the other replicas.
  Status Build() {
    FERRY_ASSIGN_OR_RETURN(std::vector<int> stage_of,
                           PipelineStages(static_cast<int>(c_.num_layers), m_.pp));
    std::vector<std::string> prefix(c_.num_layers);
    int local = 0;
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (l > 0 && stage_of[l - 1] != stage_of[l]) local = 0;
      prefix[l] = "decoder.layers." + Num(local++) + ".";
    }
    Section dense = Begin(out_);
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      Status st = Layer(l, stage_of[l], prefix[l]);
      if (!st.ok()) {
        return st.WithContext("megatron layer " + Num(l) + " (stage " + Num(stage_of[l]) + ")");
      }
    }
    const int last = m_.pp - 1;
    FERRY_RETURN_IF_ERROR(
        Vocab(EmbeddingName(), TpGroup(0), kMegatronVocabPad, "embedding.word_embeddings.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), TpGroup(last),
                                     c_.family == ModelFamily::kNemotronH
                                         ? "decoder.final_norm.weight"
                                         : "decoder.final_layernorm.weight"));
    FERRY_RETURN_IF_ERROR(
        Vocab(OutputName(), TpGroup(last), kMegatronVocabPad, "output_layer.weight"));
    End(out_, dense);
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c_.num_layers; ++l) moe_layers += c_.IsMoeLayer(l) ? 1 : 0;
    // Each expert: gate and up shards plus a down shard on each of its etp ranks (as stacks: each
    // EP rank's local experts together, unless in separate buffers).
    const int64_t expert_fragments =
        moe_layers * c_.num_experts * 3 * m_.etp /
        std::max<int64_t>(
            1, stack_experts_ && !m_.separate_expert_buffers ? c_.num_experts / m_.ep : 1);
    // Two buffers (linear_fc1, linear_fc2) per expert, or per EP rank when stacked.
    const int64_t expert_buffers =
        moe_layers * (m_.separate_expert_buffers ? c_.num_experts : m_.ep) * 2 * m_.etp;
    const size_t replicas = static_cast<size_t>(m_.cp * m_.dp);
    out_.fragments.reserve((dense.fragments_end - dense.fragments_begin) * replicas +
                           static_cast<size_t>(expert_fragments * edp_));
    out_.buffers.reserve((dense.buffers_end - dense.buffers_begin) * replicas +
                         static_cast<size_t>(expert_buffers * edp_));
    Section experts = Begin(out_);
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, stage_of[l], prefix[l]);
      if (!st.ok()) return st.WithContext("megatron experts of layer " + Num(l));
    }
    End(out_, experts);
    FERRY_RETURN_IF_ERROR(CloneSection(out_, dense, Shifts(m_.cp * m_.dp, m_.tp)));
    return CloneSection(out_, experts, Shifts(edp_, m_.etp * m_.ep));
  }

 private:
  // The TP group of DP/CP replica 0 of stage s; weights replicated over TP live on all of it.
  std::vector<int> TpGroup(int s) const {
    std::vector<int> r(m_.tp);
    std::iota(r.begin(), r.end(), first_ + stage_size_ * s);
    return r;
  }

  Status Layer(int64_t l, int s, const std::string& p) {
    switch (c_.KindOfLayer(l)) {
      case LayerKind::kDecoder: {
        if (c_.IsMla()) {
          FERRY_RETURN_IF_ERROR(Replicated(H(l, "input_layernorm.weight"), TpGroup(s),
                                           p + "input_layernorm.weight"));
          FERRY_RETURN_IF_ERROR(MlaAttention(l, s, p));
        } else {
          FERRY_RETURN_IF_ERROR(GqaAttention(l, s, p, "self_attn.", "input_layernorm.weight"));
        }
        if (c_.IsMoeLayer(l)) return Moe(l, s, p);
        return DenseMlp(l, s, p, "post_attention_layernorm.weight", "mlp.");
      }
      case LayerKind::kAttention: return GqaAttention(l, s, p, "mixer.", "norm.weight");
      case LayerKind::kMlp: return DenseMlp(l, s, p, "norm.weight", "mixer.");
      case LayerKind::kMamba: {
        FERRY_RETURN_IF_ERROR(
            Replicated(H(l, "norm.weight"), TpGroup(s), p + "mixer.in_proj.layer_norm_weight"));
        return MambaMixer(l, TpGroup(s), [&](const std::string& x) { return p + "mixer." + x; },
                          "A_log");
      }
    }
    return Internal("unknown layer kind");
  }

  Status GqaAttention(int64_t l, int s, const std::string& p, const std::string& module,
                      const std::string& norm) {
    const std::string qkv = p + "self_attention.linear_qkv.";
    FERRY_RETURN_IF_ERROR(Replicated(H(l, norm), TpGroup(s), qkv + "layer_norm_weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* q, LayerTensor(l, module + "q_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* k, LayerTensor(l, module + "k_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* v, LayerTensor(l, module + "v_proj.weight"));
    FERRY_RETURN_IF_ERROR(AddMegatronQkvInterleaved(out_, *q, *k, *v, static_cast<int>(c_.num_heads),
                                                    static_cast<int>(c_.num_kv_heads), c_.head_dim,
                                                    TpGroup(s), qkv + "weight"));
    if (c_.qk_norm) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, module + "q_norm.weight"), TpGroup(s),
                                       p + "self_attention.q_layernorm.weight"));
      FERRY_RETURN_IF_ERROR(Replicated(H(l, module + "k_norm.weight"), TpGroup(s),
                                       p + "self_attention.k_layernorm.weight"));
    }
    return Row(H(l, module + "o_proj.weight"), TpGroup(s), p + "self_attention.linear_proj.weight");
  }

  Status MlaAttention(int64_t l, int s, const std::string& p) {
    const std::string a = p + "self_attention.";
    const std::vector<int> all = TpGroup(s);
    const std::vector<int>& g = all;
    if (c_.q_lora_rank > 0) {
      FERRY_RETURN_IF_ERROR(
          Replicated(H(l, "self_attn.q_a_proj.weight"), all, a + "linear_q_down_proj.weight"));
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.q_a_layernorm.weight"), all,
                                       a + "linear_q_up_proj.layer_norm_weight"));
    }
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_proj_with_mqa.weight"), all,
                                     a + "linear_kv_down_proj.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_layernorm.weight"), all,
                                     a + "linear_kv_up_proj.layer_norm_weight"));
    if (c_.q_lora_rank > 0) {
      FERRY_RETURN_IF_ERROR(
          Column(H(l, "self_attn.q_b_proj.weight"), g, a + "linear_q_up_proj.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_proj.weight"), g, a + "linear_q_proj.weight"));
    }
    FERRY_RETURN_IF_ERROR(
        Column(H(l, "self_attn.kv_b_proj.weight"), g, a + "linear_kv_up_proj.weight"));
    return Row(H(l, "self_attn.o_proj.weight"), g, a + "linear_proj.weight");
  }

  // Dense MLP: linear_fc1 = [gate; up] per TP shard (SwiGLU) or up alone (Nemotron-H's relu^2).
  Status DenseMlp(int64_t l, int s, const std::string& p, const std::string& norm,
                  const std::string& module) {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, norm), TpGroup(s), p + "mlp.linear_fc1.layer_norm_weight"));
    const std::vector<int> g = TpGroup(s);
    if (c_.family != ModelFamily::kNemotronH) {
      FERRY_RETURN_IF_ERROR(GateUp(H(l, module + "gate_proj.weight"), H(l, module + "up_proj.weight"),
                                   g, p + "mlp.linear_fc1.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Column(H(l, module + "up_proj.weight"), g, p + "mlp.linear_fc1.weight"));
    }
    return Row(H(l, module + "down_proj.weight"), g, p + "mlp.linear_fc2.weight");
  }

  // The MoE layer's router, norm and shared expert (replica 0; experts come from Experts()).
  Status Moe(int64_t l, int s, const std::string& p) {
    const std::vector<int> g = TpGroup(s);
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, "post_attention_layernorm.weight"), g, p + "pre_mlp_layernorm.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.weight"), g, p + "mlp.router.weight"));
    if (c_.router_bias) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.e_score_correction_bias"), g,
                                       p + "mlp.router.expert_bias"));
    }
    if (c_.num_shared_experts == 0) return Status::Ok();
    FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.shared_experts.gate_proj.weight"),
                                 H(l, "mlp.shared_experts.up_proj.weight"), g,
                                 p + "mlp.shared_experts.linear_fc1.weight"));
    return Row(H(l, "mlp.shared_experts.down_proj.weight"), g,
               p + "mlp.shared_experts.linear_fc2.weight");
  }

  // Expert-DP replica 0 of the routed experts: EP rank r owns experts [r*E/ep, (r+1)*E/ep), each
  // split over its ETP group as linear_fc1 = [gate; up] shards and linear_fc2, stacked by local
  // expert in one buffer each (or one buffer per local expert, linear_fc1.weight<local>).
  Status Experts(int64_t l, int s, const std::string& p) {
    if (stack_experts_) return ExpertStacks(l, s, p);
    const int64_t per_rank = c_.num_experts / m_.ep;
    const int64_t fc1_bytes = 2 * (c_.moe_intermediate / m_.etp) * c_.hidden * DTypeSize(c_.dtype);
    const bool separate = m_.separate_expert_buffers;
    auto suffix = [&](int64_t le) { return separate ? Num(le) : std::string(); };
    std::vector<int> group(m_.etp);
    for (int ep = 0; ep < m_.ep; ++ep) {
      std::iota(group.begin(), group.end(), first_ + stage_size_ * s + m_.etp * ep);
      for (int64_t le = 0; le < per_rank; ++le) {
        const int64_t e = ep * per_rank + le;
        FERRY_RETURN_IF_ERROR(GateUp(ExpertTensorName(c_, l, e, "gate_proj"),
                                     ExpertTensorName(c_, l, e, "up_proj"), group,
                                     p + "mlp.experts.linear_fc1.weight" + suffix(le),
                                     separate ? 0 : le * fc1_bytes));
        FERRY_RETURN_IF_ERROR(Row(ExpertTensorName(c_, l, e, "down_proj"), group,
                                  p + "mlp.experts.linear_fc2.weight" + suffix(le)));
      }
    }
    return Status::Ok();
  }

  // Experts() with the experts as tensor stacks: the same bytes in the same buffers, one fragment
  // per projection, EP rank and ETP shard spanning the rank's local experts (one per local expert
  // with separate buffers).
  Status ExpertStacks(int64_t l, int s, const std::string& p) {
    FERRY_ASSIGN_OR_RETURN(const auto ids, AddExpertStacks(l));
    const auto [gate, up, down] = ids;
    const int64_t per_rank = c_.num_experts / m_.ep;
    const int64_t inter = c_.moe_intermediate / m_.etp;
    const int64_t hidden = c_.hidden;
    const int64_t elem = DTypeSize(c_.dtype);
    const bool separate = m_.separate_expert_buffers;
    // linear_fc1 per local expert: [gate shard; up shard] of `inter` rows each; linear_fc2 per
    // local expert: [hidden, inter].
    const std::array<int64_t, kMaxDims> fc1_strides{2 * inter * hidden, hidden, 1};
    const std::array<int64_t, kMaxDims> fc2_strides{hidden * inter, inter, 1};
    for (int ep = 0; ep < m_.ep; ++ep) {
      for (int i = 0; i < m_.etp; ++i) {
        const int rank = first_ + stage_size_ * s + m_.etp * ep + i;
        // Experts [first, first + count) of this rank in buffers named with `suffix`.
        auto place = [&](int64_t first, int64_t count, const std::string& suffix) {
          Box rows = Box::FromShape({count, inter, hidden});
          rows.lo[0] = first;
          rows.hi[0] = first + count;
          rows.lo[1] = i * inter;
          rows.hi[1] = (i + 1) * inter;
          Box cols = Box::FromShape({count, hidden, inter});
          cols.lo[0] = first;
          cols.hi[0] = first + count;
          cols.lo[2] = i * inter;
          cols.hi[2] = (i + 1) * inter;
          const std::string fc1 = p + "mlp.experts.linear_fc1.weight" + suffix;
          const std::string fc2 = p + "mlp.experts.linear_fc2.weight" + suffix;
          out_.PlaceFragment(gate, rows, rank, fc1, 0, fc1_strides);
          out_.PlaceFragment(up, rows, rank, fc1, inter * hidden * elem, fc1_strides);
          out_.PlaceFragment(down, cols, rank, fc2, 0, fc2_strides);
        };
        if (!separate) {
          place(ep * per_rank, per_rank, "");
          continue;
        }
        for (int64_t le = 0; le < per_rank; ++le) place(ep * per_rank + le, 1, Num(le));
      }
    }
    return Status::Ok();
  }

  MegatronParallel m_;
  int first_;
  int stage_size_ = 0;
  int edp_ = 0;
};

// ---------------------------------------------------------------------------------------------
// vLLM

class VllmWriter : public LayoutWriter {
 public:
  VllmWriter(const ModelPreset& preset, const VllmParallel& v, bool stack_experts, int first_rank,
             Layout& out)
      : LayoutWriter(preset, stack_experts, out), v_(v), first_(first_rank) {
    all_.resize(v.tp);  // DP replica 0; the others are copies
    std::iota(all_.begin(), all_.end(), first_rank);
  }

  // Builds DP replica 0 of everything but the routed experts with the builders, the experts on
  // all tp*dp ranks, then copies replica 0 to the other DP ranks, then the whole engine to the
  // other engines.
  Status Build() {
    Section engine = Begin(out_);
    FERRY_RETURN_IF_ERROR(BuildEngine());
    End(out_, engine);
    return CloneSection(out_, engine, Shifts(v_.engines, v_.tp * v_.dp));
  }

 private:
  Status BuildEngine() {
    Section dense = Begin(out_);
    FERRY_RETURN_IF_ERROR(Vocab(EmbeddingName(), all_, kVllmVocabPad, "model.embed_tokens.weight"));
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      Status st = Layer(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("vllm layer " + Num(l));
    }
    FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), all_,
                                     c_.family == ModelFamily::kNemotronH ? "model.norm_f.weight"
                                                                          : "model.norm.weight"));
    FERRY_RETURN_IF_ERROR(Vocab(OutputName(), all_, kVllmVocabPad, "lm_head.weight"));
    End(out_, dense);
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c_.num_layers; ++l) moe_layers += c_.IsMoeLayer(l) ? 1 : 0;
    const int64_t world = static_cast<int64_t>(v_.tp) * v_.dp;
    const int64_t expert_fragments =
        moe_layers * world * (stack_experts_ ? 1 : c_.num_experts / v_.ep) * 3;
    const size_t dense_fragments = dense.fragments_end - dense.fragments_begin;
    out_.fragments.reserve(out_.fragments.size() + static_cast<size_t>(expert_fragments) +
                           dense_fragments * static_cast<size_t>(v_.dp - 1));
    out_.buffers.reserve(out_.buffers.size() + static_cast<size_t>(moe_layers * world * 2) +
                         (dense.buffers_end - dense.buffers_begin) * static_cast<size_t>(v_.dp - 1));
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("vllm experts of layer " + Num(l));
    }
    return CloneSection(out_, dense, Shifts(v_.dp, v_.tp));
  }

  Status Layer(int64_t l, const std::string& p) {
    switch (c_.KindOfLayer(l)) {
      case LayerKind::kDecoder: {
        FERRY_RETURN_IF_ERROR(
            Replicated(H(l, "input_layernorm.weight"), all_, p + "input_layernorm.weight"));
        FERRY_RETURN_IF_ERROR(c_.IsMla() ? MlaAttention(l, p) : GqaAttention(l, p, "self_attn."));
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "post_attention_layernorm.weight"), all_,
                                         p + "post_attention_layernorm.weight"));
        if (c_.IsMoeLayer(l)) return Moe(l, p);
        FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.gate_proj.weight"), H(l, "mlp.up_proj.weight"), all_,
                                     p + "mlp.gate_up_proj.weight"));
        return Row(H(l, "mlp.down_proj.weight"), all_, p + "mlp.down_proj.weight");
      }
      case LayerKind::kAttention:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        return GqaAttention(l, p, "mixer.");
      case LayerKind::kMlp:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        FERRY_RETURN_IF_ERROR(Column(H(l, "mixer.up_proj.weight"), all_, p + "mixer.up_proj.weight"));
        return Row(H(l, "mixer.down_proj.weight"), all_, p + "mixer.down_proj.weight");
      case LayerKind::kMamba:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        return MambaMixer(l, all_, [&](const std::string& x) { return p + "mixer." + x; }, "A");
    }
    return Internal("unknown layer kind");
  }

  // qkv_proj per TP rank: [q heads of the rank; its KV heads (k); the same (v)]. With tp > kv
  // heads, each KV head is replicated on tp / kv consecutive ranks.
  Status GqaAttention(int64_t l, const std::string& p, const std::string& module) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* q, LayerTensor(l, module + "q_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* k, LayerTensor(l, module + "k_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* v, LayerTensor(l, module + "v_proj.weight"));
    const int64_t tp = v_.tp;
    const int64_t kv = c_.num_kv_heads;
    const int64_t hd = c_.head_dim;
    const std::string attn = p + (module == "mixer." ? "mixer." : "self_attn.");
    for (int64_t i = 0; i < tp; ++i) {
      Box kv_box = tp <= kv ? RowShard(*k, 0, kv * hd, tp, i)
                            : Rows(*k, i / (tp / kv) * hd, (i / (tp / kv) + 1) * hd);
      FERRY_RETURN_IF_ERROR(AddFusedConcat(
          out_, all_[i], attn + "qkv_proj.weight",
          {{*q, RowShard(*q, 0, q->shape[0], tp, i)}, {*k, kv_box}, {*v, kv_box}}, 0));
    }
    FERRY_RETURN_IF_ERROR(Row(H(l, module + "o_proj.weight"), all_, attn + "o_proj.weight"));
    if (!c_.qk_norm) return Status::Ok();
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, module + "q_norm.weight"), all_, attn + "q_norm.weight"));
    return Replicated(H(l, module + "k_norm.weight"), all_, attn + "k_norm.weight");
  }

  // vLLM's DeepSeek MLA: fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa] replicated (with a
  // q LoRA), q_b_proj / kv_b_proj column-parallel over heads, o_proj row-parallel.
  Status MlaAttention(int64_t l, const std::string& p) {
    const std::string a = p + "self_attn.";
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* kv_a, LayerTensor(l, "self_attn.kv_a_proj_with_mqa.weight"));
    if (c_.q_lora_rank > 0) {
      FERRY_ASSIGN_OR_RETURN(const TensorSpec* q_a, LayerTensor(l, "self_attn.q_a_proj.weight"));
      for (int rank : all_) {
        FERRY_RETURN_IF_ERROR(AddFusedConcat(
            out_, rank, a + "fused_qkv_a_proj.weight",
            {{*q_a, Box::FromShape(q_a->shape)}, {*kv_a, Box::FromShape(kv_a->shape)}}, 0));
      }
      FERRY_RETURN_IF_ERROR(
          Replicated(H(l, "self_attn.q_a_layernorm.weight"), all_, a + "q_a_layernorm.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_proj_with_mqa.weight"), all_,
                                       a + "kv_a_proj_with_mqa.weight"));
    }
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, "self_attn.kv_a_layernorm.weight"), all_, a + "kv_a_layernorm.weight"));
    if (c_.q_lora_rank > 0) {
      FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_b_proj.weight"), all_, a + "q_b_proj.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_proj.weight"), all_, a + "q_proj.weight"));
    }
    FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.kv_b_proj.weight"), all_, a + "kv_b_proj.weight"));
    return Row(H(l, "self_attn.o_proj.weight"), all_, a + "o_proj.weight");
  }

  // The MoE layer's router and shared expert (DP replica 0).
  Status Moe(int64_t l, const std::string& p) {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.weight"), all_, p + "mlp.gate.weight"));
    if (c_.router_bias) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.e_score_correction_bias"), all_,
                                       p + "mlp.gate.e_score_correction_bias"));
    }
    if (c_.num_shared_experts == 0) return Status::Ok();
    FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.shared_experts.gate_proj.weight"),
                                 H(l, "mlp.shared_experts.up_proj.weight"), all_,
                                 p + "mlp.shared_experts.gate_up_proj.weight"));
    return Row(H(l, "mlp.shared_experts.down_proj.weight"), all_,
               p + "mlp.shared_experts.down_proj.weight");
  }

  // FusedMoE over all tp*dp ranks: rank m owns the experts of EP rank m / moe_tp and shard
  // m % moe_tp of each one's FFN. w13_weight is [local experts, 2 * I / moe_tp, hidden] with
  // [gate shard; up shard] per expert, w2_weight is [local experts, hidden, I / moe_tp]. As tensor
  // stacks, each rank holds one fragment of each projection's stack, spanning its local experts
  // with the buffers' own strides; as members, one per expert. This is the hottest loop at scale
  // (DeepSeek-V3 on 512 ranks places ~180k member fragments), so fragments are placed directly
  // into each rank's two buffers, looked up once per layer.
  Status Experts(int64_t l, const std::string& p) {
    const int64_t world = static_cast<int64_t>(v_.tp) * v_.dp;
    const int64_t moe_tp = world / v_.ep;
    const int64_t per_rank = c_.num_experts / v_.ep;
    const int64_t inter = c_.moe_intermediate / moe_tp;
    const int64_t hidden = c_.hidden;
    const int64_t elem = DTypeSize(c_.dtype);
    const std::string w13 = p + "mlp.experts.w13_weight";
    const std::string w2 = p + "mlp.experts.w2_weight";
    // Tensor ids of gate, up and down: the stacks, or per expert, added once.
    std::vector<std::array<int, 3>> ids;
    if (stack_experts_) {
      FERRY_ASSIGN_OR_RETURN(const auto stacks, AddExpertStacks(l));
      ids.push_back(stacks);
    } else {
      ids.resize(c_.num_experts);
      for (int64_t e = 0; e < c_.num_experts; ++e) {
        const char* projs[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int j = 0; j < 3; ++j) {
          FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(ExpertTensorName(c_, l, e, projs[j])));
          FERRY_ASSIGN_OR_RETURN(ids[e][j], out_.AddTensor(*t));
        }
      }
    }
    const auto w13_strides = RowMajorStrides({per_rank, 2 * inter, hidden});
    const auto w2_strides = RowMajorStrides({per_rank, hidden, inter});
    std::array<int64_t, kMaxDims> gate_up_strides{}, down_strides{};
    gate_up_strides[0] = w13_strides[1];
    gate_up_strides[1] = w13_strides[2];
    down_strides[0] = w2_strides[1];
    down_strides[1] = w2_strides[2];
    for (int64_t m = 0; m < world; ++m) {
      const int rank = first_ + static_cast<int>(m);
      const int64_t ep_rank = m / moe_tp;
      const int64_t shard = m % moe_tp;
      const int b13 = out_.GetOrAddBuffer(rank, w13);
      const int b2 = out_.GetOrAddBuffer(rank, w2);
      const int64_t up_offset = inter * w13_strides[1] * elem;  // after the gate rows
      if (stack_experts_) {
        const auto [gate, up, down] = ids[0];
        Box rows = Box::FromShape({c_.num_experts, inter, hidden});
        rows.lo[0] = ep_rank * per_rank;
        rows.hi[0] = (ep_rank + 1) * per_rank;
        rows.lo[1] = shard * inter;
        rows.hi[1] = (shard + 1) * inter;
        Box cols = Box::FromShape({c_.num_experts, hidden, c_.moe_intermediate});
        cols.lo[0] = rows.lo[0];
        cols.hi[0] = rows.hi[0];
        cols.lo[2] = shard * inter;
        cols.hi[2] = (shard + 1) * inter;
        out_.fragments.push_back({gate, rows, {rank, b13, 0, w13_strides}});
        out_.fragments.push_back({up, rows, {rank, b13, up_offset, w13_strides}});
        out_.fragments.push_back({down, cols, {rank, b2, 0, w2_strides}});
      } else {
        Box rows = Box::FromShape({inter, hidden});
        rows.lo[0] = shard * inter;
        rows.hi[0] = (shard + 1) * inter;
        Box cols = Box::FromShape({hidden, c_.moe_intermediate});
        cols.lo[1] = shard * inter;
        cols.hi[1] = (shard + 1) * inter;
        for (int64_t le = 0; le < per_rank; ++le) {
          const auto& [gate, up, down] = ids[ep_rank * per_rank + le];
          const int64_t at13 = le * w13_strides[0] * elem;
          out_.fragments.push_back({gate, rows, {rank, b13, at13, gate_up_strides}});
          out_.fragments.push_back({up, rows, {rank, b13, at13 + up_offset, gate_up_strides}});
          out_.fragments.push_back(
              {down, cols, {rank, b2, le * w2_strides[0] * elem, down_strides}});
        }
      }
      out_.buffers.GrowBytes(static_cast<size_t>(b13), per_rank * w13_strides[0] * elem);
      out_.buffers.GrowBytes(static_cast<size_t>(b2), per_rank * w2_strides[0] * elem);
    }
    return Status::Ok();
  }

  VllmParallel v_;
  int first_;
  std::vector<int> all_;  // the TP group of DP replica 0
};

Status CheckMamba(const ModelConfig& c, int tp) {
  if (c.family != ModelFamily::kNemotronH) return Status::Ok();
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_num_heads", c.mamba_num_heads, "tp", tp));
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_groups", c.mamba_groups, "tp", tp));
  return CheckDivides("mamba inner size", c.MambaInner(), "tp", tp);
}

// Divisibility shared by both frameworks' tensor-parallel attention and dense MLPs.
Status CheckTensorParallel(const ModelConfig& c, int tp) {
  FERRY_RETURN_IF_ERROR(CheckDivides("num_heads", c.num_heads, "tp", tp));
  bool has_dense_mlp = false;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerKind k = c.KindOfLayer(l);
    if (k == LayerKind::kMlp || (k == LayerKind::kDecoder && !c.IsMoeLayer(l))) has_dense_mlp = true;
  }
  if (has_dense_mlp) FERRY_RETURN_IF_ERROR(CheckDivides("intermediate", c.intermediate, "tp", tp));
  if (c.num_shared_experts > 0) {
    FERRY_RETURN_IF_ERROR(CheckDivides("shared expert size", c.num_shared_experts * c.moe_intermediate,
                                       "tp", tp));
  }
  return CheckMamba(c, tp);
}

}  // namespace

std::string FrameworkSpec::ToString() const {
  const std::string naming = stack_expert_tensors ? "" : ",expert_tensors=members";
  if (kind == Kind::kVllm) {
    return "vllm:tp=" + Num(vllm.tp) + ",dp=" + Num(vllm.dp) + ",ep=" + Num(vllm.ep) +
           (vllm.engines > 1 ? ",engines=" + Num(vllm.engines) : "") + naming;
  }
  const MegatronParallel& m = megatron;
  std::string s = "megatron:tp=" + Num(m.tp) + ",pp=" + Num(m.pp) + ",ep=" + Num(m.ep);
  if (m.etp > 0) s += ",etp=" + Num(m.etp);
  if (m.dp > 0) s += ",dp=" + Num(m.dp);
  s += ",cp=" + Num(m.cp);
  return (m.separate_expert_buffers ? s + ",experts=separate" : s) + naming;
}

Result<FrameworkSpec> ParseFrameworkSpec(const std::string& text) {
  const std::string usage =
      " (expected megatron:tp=N,pp=N,ep=N,etp=N,dp=N,cp=N,experts=stacked|separate or "
      "vllm:tp=N,dp=N,ep=N,engines=N, either with expert_tensors=stacks|members; every key "
      "optional)";
  const size_t colon = text.find(':');
  const std::string name = Trim(text.substr(0, colon));
  FrameworkSpec spec;
  std::vector<std::pair<std::string, int*>> keys;
  if (name == "megatron") {
    spec.kind = FrameworkSpec::Kind::kMegatron;
    MegatronParallel& m = spec.megatron;
    keys = {{"tp", &m.tp}, {"pp", &m.pp}, {"ep", &m.ep}, {"etp", &m.etp},
            {"dp", &m.dp}, {"cp", &m.cp}, {"experts", nullptr}, {"expert_tensors", nullptr}};
  } else if (name == "vllm") {
    spec.kind = FrameworkSpec::Kind::kVllm;
    VllmParallel& v = spec.vllm;
    keys = {{"tp", &v.tp}, {"dp", &v.dp}, {"ep", &v.ep}, {"engines", &v.engines},
            {"expert_tensors", nullptr}};
  } else {
    return InvalidArgument("unknown framework '" + name + "' in '" + text + "'" + usage);
  }
  if (colon == std::string::npos) return spec;
  std::set<std::string> seen;
  for (const std::string& item : Split(text.substr(colon + 1), ',')) {
    const std::string kv = Trim(item);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string key = Trim(kv.substr(0, eq));
    auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; });
    if (it == keys.end()) {
      return InvalidArgument("unknown key '" + key + "' for " + name + " in '" + text + "'" + usage);
    }
    if (!seen.insert(key).second) {
      return InvalidArgument("key '" + key + "' given twice in '" + text + "'");
    }
    const std::string value = eq == std::string::npos ? "" : Trim(kv.substr(eq + 1));
    if (key == "experts") {
      if (value != "stacked" && value != "separate") {
        return InvalidArgument("bad value '" + value + "' for experts in '" + text +
                               "': expected stacked or separate");
      }
      spec.megatron.separate_expert_buffers = value == "separate";
      continue;
    }
    if (key == "expert_tensors") {
      if (value != "stacks" && value != "members") {
        return InvalidArgument("bad value '" + value + "' for expert_tensors in '" + text +
                               "': expected stacks or members");
      }
      spec.stack_expert_tensors = value == "stacks";
      continue;
    }
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || end != value.c_str() + value.size() || parsed < 1 || parsed > (1 << 20)) {
      return InvalidArgument("bad value '" + value + "' for " + key + " in '" + text +
                             "': expected a positive integer");
    }
    *it->second = static_cast<int>(parsed);
  }
  return spec;
}

Result<FrameworkSpec> ResolveFrameworkSpec(const FrameworkSpec& spec, const ModelConfig& c) {
  FrameworkSpec r = spec;
  const std::string where = "framework " + spec.ToString() + " for model '" + c.name + "'";
  auto fail = [&](Status s) { return s.WithContext(where); };
  if (spec.kind == FrameworkSpec::Kind::kMegatron) {
    MegatronParallel& m = r.megatron;
    if (m.etp == 0) m.etp = m.tp;
    if (!c.IsMoe() && m.ep != 1) {
      return fail(InvalidArgument("the model has no experts; ep must be 1"));
    }
    if (m.dp == 0) {
      const int tpcp = m.tp * m.cp;
      m.dp = c.IsMoe() ? std::lcm(tpcp, m.ep * m.etp) / tpcp : 1;
    }
    if (m.pp > c.num_layers) {
      return fail(InvalidArgument("pp " + Num(m.pp) + " exceeds the " + Num(c.num_layers) + " layers"));
    }
    Status st = CheckTensorParallel(c, m.tp);
    if (st.ok() && !c.IsMla()) st = CheckDivides("num_kv_heads (query groups)", c.num_kv_heads, "tp", m.tp);
    if (st.ok() && c.IsMoe()) {
      st = CheckDivides("num_experts", c.num_experts, "ep", m.ep);
      if (st.ok()) st = CheckDivides("moe_intermediate", c.moe_intermediate, "etp", m.etp);
      if (st.ok()) {
        st = CheckDivides("tp*cp*dp (ranks per stage)", static_cast<int64_t>(m.tp) * m.cp * m.dp,
                          "ep*etp", static_cast<int64_t>(m.ep) * m.etp);
      }
    }
    if (!st.ok()) return fail(st);
    return r;
  }
  VllmParallel& v = r.vllm;
  if (!c.IsMoe() && v.ep != 1) return fail(InvalidArgument("the model has no experts; ep must be 1"));
  Status st = CheckTensorParallel(c, v.tp);
  if (st.ok() && !c.IsMla() && c.num_kv_heads % v.tp != 0 && v.tp % c.num_kv_heads != 0) {
    st = InvalidArgument("num_kv_heads " + Num(c.num_kv_heads) + " and tp " + Num(v.tp) +
                         " do not divide one another");
  }
  if (st.ok() && c.IsMoe()) {
    const int64_t world = static_cast<int64_t>(v.tp) * v.dp;
    st = CheckDivides("tp*dp", world, "ep", v.ep);
    if (st.ok()) st = CheckDivides("num_experts", c.num_experts, "ep", v.ep);
    if (st.ok()) st = CheckDivides("moe_intermediate", c.moe_intermediate, "tp*dp/ep", world / v.ep);
  }
  if (!st.ok()) return fail(st);
  return r;
}

int NumRanks(const FrameworkSpec& s) {
  if (s.kind == FrameworkSpec::Kind::kVllm) return s.vllm.tp * s.vllm.dp * s.vllm.engines;
  return s.megatron.tp * s.megatron.cp * s.megatron.dp * s.megatron.pp;
}

Result<Layout> BuildFrameworkLayout(const ModelPreset& preset, const FrameworkSpec& spec,
                                    int first_rank) {
  if (first_rank < 0) return InvalidArgument("first rank " + Num(first_rank) + " is negative");
  FERRY_ASSIGN_OR_RETURN(FrameworkSpec resolved, ResolveFrameworkSpec(spec, preset.config()));
  Layout layout;
  layout.tensors.reserve(preset.tensors().size());
  Status st = resolved.kind == FrameworkSpec::Kind::kMegatron
                  ? MegatronWriter(preset, resolved.megatron, resolved.stack_expert_tensors,
                                   first_rank, layout)
                        .Build()
                  : VllmWriter(preset, resolved.vllm, resolved.stack_expert_tensors, first_rank,
                               layout)
                        .Build();
  if (!st.ok()) return st.WithContext("building " + resolved.ToString() + " layout");
  return Result<Layout>(std::move(layout));
}

Result<RefitLayouts> BuildRefitLayouts(const ModelPreset& preset, const FrameworkSpec& source,
                                       const FrameworkSpec& destination,
                                       const RefitOptions& options) {
  if (options.gpus_per_node < 1) {
    return InvalidArgument("gpus_per_node must be positive, got " + Num(options.gpus_per_node));
  }
  RefitLayouts out;
  FERRY_ASSIGN_OR_RETURN(out.source_spec, ResolveFrameworkSpec(source, preset.config()));
  FERRY_ASSIGN_OR_RETURN(out.destination_spec, ResolveFrameworkSpec(destination, preset.config()));
  const int m = NumRanks(out.source_spec);
  const int n = NumRanks(out.destination_spec);
  out.destination_first_rank = options.colocated ? 0 : m;
  FERRY_ASSIGN_OR_RETURN(out.source, BuildFrameworkLayout(preset, out.source_spec, 0));
  FERRY_ASSIGN_OR_RETURN(out.destination,
                         BuildFrameworkLayout(preset, out.destination_spec, out.destination_first_rank));
  out.topology = Topology::Uniform(std::max(m, out.destination_first_rank + n), options.gpus_per_node);
  return Result<RefitLayouts>(std::move(out));
}

}  // namespace ferry::models
