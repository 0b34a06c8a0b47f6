// The vLLM layout of a model preset (tools/models/vllm_layout.h): VllmWriter builds DP replica 0
// with core/layout's builders, places the routed experts on every rank of the engine, then copies
// replica 0 to the other DP ranks and the whole engine to the other engines.
#include "tools/models/vllm_layout.h"

#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "core/layout/builders.h"
#include "tools/models/layout_writer.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

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
    Section engine = BeginSection(out_);
    FERRY_RETURN_IF_ERROR(BuildEngine());
    EndSection(out_, engine);
    return CloneSection(out_, engine, Shifts(v_.engines, v_.tp * v_.dp));
  }

 private:
  Status BuildEngine() {
    Section dense = BeginSection(out_);
    FERRY_ASSIGN_OR_RETURN(const int64_t padded, VllmPaddedVocab(c_.vocab, v_.tp));
    // vllm/model_executor/layers/vocab_parallel_embedding.py: num_embeddings_per_partition rows
    FERRY_RETURN_IF_ERROR(Vocab(EmbeddingName(), all_, padded / v_.tp, "model.embed_tokens.weight"));
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      Status st = Layer(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("vllm layer " + Num(l));
    }
    FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), all_,
                                     c_.family == ModelFamily::kNemotronH ? "model.norm_f.weight"
                                                                          : "model.norm.weight"));
    // vllm/model_executor/layers/vocab_parallel_embedding.py ParallelLMHead: the embedding's split
    FERRY_RETURN_IF_ERROR(Vocab(OutputName(), all_, padded / v_.tp, "lm_head.weight"));
    EndSection(out_, dense);
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
  // with the buffers' own strides; as members, one per expert. With members this loop places most
  // of a large MoE layout's fragments, so it writes them straight into each rank's two buffers,
  // looked up once per layer, instead of going through the builders.
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

}  // namespace

Status BuildVllmLayout(const ModelPreset& preset, const VllmParallel& resolved,
                       bool stack_expert_tensors, int first_rank, Layout& out) {
  return VllmWriter(preset, resolved, stack_expert_tensors, first_rank, out).Build();
}

}  // namespace ferry::models
