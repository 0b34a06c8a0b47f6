// Megatron's DDP contiguous parameter buffers (tools/models/megatron_param_buffers.h).
#include "tools/models/megatron_param_buffers.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/base/strings.h"
#include "tools/models/distributed_optimizer_buffer.h"

namespace ferry::models {

namespace {

// A decoder layer's parameters in registration order (named_parameters() visits a module's own
// parameters, then its children in the order __init__ assigns them):
// megatron/core/transformer/transformer_layer.py TransformerLayer (input_layernorm,
// self_attention, pre_mlp_layernorm, mlp); megatron/core/transformer/attention.py Attention
// (linear_proj) before SelfAttention (linear_qkv, q_layernorm, k_layernorm);
// megatron/core/transformer/multi_latent_attention.py MLASelfAttention (linear_q_proj or
// linear_q_down_proj, linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj); Transformer
// Engine's transformer_engine/pytorch/module/layernorm_linear.py LayerNormLinear.__init__
// registers layer_norm_weight (layer_norm_bias only for LayerNorm, not RMSNorm), then weight, then
// bias when use_bias (Qwen2's q/k/v biases: Megatron's add_qkv_bias);
// megatron/core/transformer/moe/moe_layer.py MoELayer (router, experts, shared_experts).
constexpr const char* kLayerParams[] = {
    "input_layernorm.weight",
    "self_attention.linear_proj.weight",
    "self_attention.linear_qkv.layer_norm_weight",
    "self_attention.linear_qkv.weight",
    "self_attention.linear_qkv.bias",
    "self_attention.q_layernorm.weight",
    "self_attention.k_layernorm.weight",
    "self_attention.linear_q_proj.weight",
    "self_attention.linear_q_down_proj.weight",
    "self_attention.linear_q_up_proj.layer_norm_weight",
    "self_attention.linear_q_up_proj.weight",
    "self_attention.linear_kv_down_proj.weight",
    "self_attention.linear_kv_up_proj.layer_norm_weight",
    "self_attention.linear_kv_up_proj.weight",
    "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc2.weight",
    "mlp.router.weight",
    "mlp.experts.",
    "mlp.shared_experts.linear_fc1.weight",
    "mlp.shared_experts.linear_fc2.weight",
};
constexpr int64_t kExpertsItem = 19;  // index of "mlp.experts." above
static_assert(std::string_view(kLayerParams[kExpertsItem]) == "mlp.experts.");

// A hybrid model's Mamba layer (megatron/core/ssm/mamba_layer.py MambaLayer: the mixer, then an
// IdentityOp norm, its RMSNorm fused into in_proj). megatron/core/ssm/mamba_mixer.py MambaMixer
// registers conv1d_weight, conv1d_bias, dt_bias, A_log and D as its own parameters, which
// named_parameters() visits before any child module's: in_proj (Transformer Engine's
// layer_norm_weight, weight), norm, out_proj. The layout names the conv parameters by their
// checkpoint keys, conv1d.weight and conv1d.bias (MambaMixer.sharded_state_dict).
const char* const kMambaLayerParams[] = {
    "mixer.conv1d.weight",
    "mixer.conv1d.bias",
    "mixer.dt_bias",
    "mixer.A_log",
    "mixer.D",
    "mixer.in_proj.layer_norm_weight",
    "mixer.in_proj.weight",
    "mixer.norm.weight",
    "mixer.out_proj.weight",
};

// The same layer in Megatron-Core before 0.19 (megatron/core/ssm/mamba_mixer.py at tag
// core_v0.18.2): MambaMixer.__init__ assigns in_proj, then conv1d as a child nn.Conv1d module
// (weight, bias), then its own dt_bias, A_log and D, then norm and out_proj; named_parameters()
// visits the own parameters first, then the children in that order.
const char* const kMambaLayerParamsBefore019[] = {
    "mixer.dt_bias",
    "mixer.A_log",
    "mixer.D",
    "mixer.in_proj.layer_norm_weight",
    "mixer.in_proj.weight",
    "mixer.conv1d.weight",
    "mixer.conv1d.bias",
    "mixer.norm.weight",
    "mixer.out_proj.weight",
};
static_assert(std::size(kMambaLayerParamsBefore019) == std::size(kMambaLayerParams));

// The decimal number that is all of `text`, or -1.
int64_t Number(const std::string& text) {
  if (text.empty() || text.size() > 9) return -1;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
  }
  return std::strtol(text.c_str(), nullptr, 10);
}

// Order of a routed-expert parameter within its layer's experts module:
// megatron/core/transformer/moe/experts.py SequentialMLP (local_experts.<i>, each fc1 then fc2)
// and TEGroupedMLP (linear_fc1 then linear_fc2; megatron/core/extensions/transformer_engine.py
// TEGroupedLinear registers weight0 .. weight<n-1>, or one stacked weight).
Result<int64_t> ExpertOrder(const std::string& rest) {
  const std::string fc1 = "linear_fc1.weight", fc2 = "linear_fc2.weight";
  if (StartsWith(rest, "local_experts.")) {
    const size_t dot = rest.find('.', 14);
    const int64_t i = dot == std::string::npos ? -1 : Number(rest.substr(14, dot - 14));
    const std::string tail = dot == std::string::npos ? "" : rest.substr(dot + 1);
    if (i >= 0 && (tail == fc1 || tail == fc2)) return 2 * i + (tail == fc2 ? 1 : 0);
  } else if (StartsWith(rest, fc1) || StartsWith(rest, fc2)) {
    const std::string n = rest.substr(fc1.size());
    const int64_t i = n.empty() ? 0 : Number(n);
    if (i >= 0) return (StartsWith(rest, fc2) ? int64_t{1} << 40 : 0) + i;
  }
  return InvalidArgument("no Megatron parameter order is modelled for expert parameter '" + rest +
                         "' (experts=legacy_grouped keeps its weights outside this ordering)");
}

// A buffer name split at its "model<v>." chunk prefix (none: chunk 0, no prefix).
struct ChunkName {
  int chunk = 0;
  std::string prefix, name;
};

ChunkName SplitChunk(const std::string& name) {
  const size_t dot = name.find('.');
  if (StartsWith(name, "model") && dot != std::string::npos) {
    const int64_t v = Number(name.substr(5, dot - 5));
    if (v >= 0) return {static_cast<int>(v), name.substr(0, dot + 1), name.substr(dot + 1)};
  }
  return {0, "", name};
}

}  // namespace

bool ParamOrderKey::operator<(const ParamOrderKey& o) const {
  return std::tie(section, layer, item, sub) < std::tie(o.section, o.layer, o.item, o.sub);
}

namespace {

// The number of a "<head><n>.<rest>" name (and *rest), or -1 when `name` is not one.
int64_t NumberedPart(const std::string& name, const std::string& head, std::string* rest) {
  const size_t dot = name.find('.', head.size());
  if (!StartsWith(name, head) || dot == std::string::npos) return -1;
  *rest = name.substr(dot + 1);
  return Number(name.substr(head.size(), dot - head.size()));
}

// A transformer or Mamba layer's parameter `rest` in kLayerParams / kMambaLayerParams order
// (kMambaLayerParamsBefore019 when `conv1d_module`), or -1 (experts: *sub their order, *expert
// set).
Result<int64_t> LayerItem(const std::string& rest, bool conv1d_module, int64_t* sub, bool* expert) {
  for (int64_t item = 0; item < static_cast<int64_t>(std::size(kLayerParams)); ++item) {
    if (item == kExpertsItem && StartsWith(rest, kLayerParams[item])) {
      FERRY_ASSIGN_OR_RETURN(*sub, ExpertOrder(rest.substr(12)));
      *expert = true;
      return item;
    }
    if (rest == kLayerParams[item]) return item;
  }
  // a layer is either a transformer layer or a Mamba layer, so the tables never share a layer;
  // Mamba items count on past the transformer table's so no item means two things
  const int64_t mamba_base = static_cast<int64_t>(std::size(kLayerParams));
  const char* const* mamba = conv1d_module ? kMambaLayerParamsBefore019 : kMambaLayerParams;
  for (int64_t item = 0; item < static_cast<int64_t>(std::size(kMambaLayerParams)); ++item) {
    if (rest == mamba[item]) return mamba_base + item;
  }
  return int64_t{-1};
}

// An MTP layer's parameters in registration order: megatron/core/transformer/
// multi_token_prediction.py MultiTokenPredictionLayer.__init__ (enorm, hnorm, eh_proj,
// mtp_model_layer, final_layernorm).
Result<int64_t> MtpItem(const std::string& rest, bool conv1d_module, int64_t* sub, bool* expert) {
  if (rest == "enorm.weight") return int64_t{0};
  if (rest == "hnorm.weight") return int64_t{1};
  if (rest == "eh_proj.weight") return int64_t{2};
  constexpr int64_t kInner = 3;  // then the inner layer's items, then final_layernorm
  constexpr int64_t kAfterInner =
      kInner + static_cast<int64_t>(std::size(kLayerParams) + std::size(kMambaLayerParams));
  if (rest == "final_layernorm.weight") return kAfterInner;
  const std::string inner = "mtp_model_layer.";
  if (!StartsWith(rest, inner)) return int64_t{-1};
  FERRY_ASSIGN_OR_RETURN(const int64_t item,
                         LayerItem(rest.substr(inner.size()), conv1d_module, sub, expert));
  return item < 0 ? -1 : kInner + item;
}

}  // namespace

// megatron/core/models/gpt/gpt_model.py GPTModel: embedding, decoder (layers, final_layernorm),
// mtp (megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionBlock.layers),
// output_layer; megatron/core/models/hybrid/hybrid_model.py HybridModel likewise, its decoder
// (megatron/core/models/hybrid/hybrid_block.py HybridStack) ending in final_norm
Result<ParamOrderKey> MegatronParamOrder(const std::string& name, bool mamba_conv1d_module) {
  if (name == "embedding.word_embeddings.weight") return ParamOrderKey{0, 0, 0, 0};
  if (name == "decoder.final_layernorm.weight" || name == "decoder.final_norm.weight") {
    return ParamOrderKey{2, 0, 0, 0};
  }
  if (name == "output_layer.weight") return ParamOrderKey{4, 0, 0, 0};
  // megatron/core/transformer/moe/router.py TopKRouter: expert_bias is a registered buffer
  const std::string bias = "mlp.router.expert_bias";
  if (name.size() >= bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0) {
    return NotFound("'" + name + "' is a module buffer, not a parameter");
  }
  std::string rest;
  ParamOrderKey key;
  int64_t item = -1;
  if (const int64_t layer = NumberedPart(name, "decoder.layers.", &rest); layer >= 0) {
    FERRY_ASSIGN_OR_RETURN(item, LayerItem(rest, mamba_conv1d_module, &key.sub, &key.expert));
    key.section = 1;
    key.layer = layer;
  } else if (const int64_t mtp = NumberedPart(name, "mtp.layers.", &rest); mtp >= 0) {
    FERRY_ASSIGN_OR_RETURN(item, MtpItem(rest, mamba_conv1d_module, &key.sub, &key.expert));
    key.section = 3;
    key.layer = mtp;
  }
  if (item >= 0) {
    key.item = item;
    return key;
  }
  return InvalidArgument("no Megatron parameter order is modelled for '" + name + "'");
}

namespace {

// One parameter of a rank's model chunk: its buffer in the input layout and how it groups.
struct Param {
  int buffer = 0;
  ParamOrderKey key;
  bool expert = false;
  DType dtype = DType::kBF16;
};

// Where an input buffer's bytes land: the output buffer's name and size, and the byte shift.
struct Move {
  std::string name;
  int64_t shift = 0;
  int64_t bytes = 0;
};

bool IsSharedEmbedding(const std::string& name, const MegatronBufferGroups& g) {
  return (g.shared_embedding && name == "embedding.word_embeddings.weight") ||
         (g.shared_output_layer && name == "output_layer.weight");
}

// Lays out one (rank, chunk, dtype, expert) group, already in named_parameters() order, as buffer
// `name`, and records each member's move.
Status LayOutGroup(const Layout& in, const std::vector<Param>& group, const std::string& name,
                   int64_t bucket_size, int dp, const MegatronBufferGroups& g,
                   std::vector<Move>& moves) {
  const int64_t elem = DTypeSize(group.front().dtype);
  std::vector<BufferParam> params;
  for (const Param& p : group) {
    const BufferSpec& b = in.buffers[static_cast<size_t>(p.buffer)];
    params.push_back({b.bytes / elem,
                      IsSharedEmbedding(SplitChunk(b.name).name, g)});
  }
  FERRY_ASSIGN_OR_RETURN(const DistributedOptimizerBuffer laid,
                         LayOutDistributedOptimizerBuffer(params, bucket_size, dp));
  for (size_t k = 0; k < group.size(); ++k) {
    moves[static_cast<size_t>(group[k].buffer)] = {name, laid.slots[k].start * elem,
                                                   laid.numel * elem};
  }
  return Status::Ok();
}

// The dtype each buffer holds (its first fragment's tensor's).
std::vector<DType> BufferDTypes(const Layout& in) {
  std::vector<DType> out(in.buffers.size(), DType::kBF16);
  std::vector<bool> seen(in.buffers.size(), false);
  for (const Fragment& f : in.fragments) {
    const size_t b = static_cast<size_t>(f.loc.buffer);
    if (!seen[b]) out[b] = in.tensors[static_cast<size_t>(f.tensor)].dtype;
    seen[b] = true;
  }
  return out;
}

// The moves of every parameter buffer of ranks in `g`; buffers left alone keep an empty name.
Result<std::vector<Move>> PlanMoves(const Layout& in, const MegatronBufferGroups& g) {
  const std::vector<DType> dtypes = BufferDTypes(in);
  std::map<std::pair<int, int>, std::vector<Param>> chunks;  // (rank, chunk) -> parameters
  for (size_t b = 0; b < in.buffers.size(); ++b) {
    const BufferSpec& spec = in.buffers[b];
    if (spec.rank < g.first_rank || spec.rank >= g.first_rank + g.num_ranks) continue;
    const ChunkName cn = SplitChunk(spec.name);
    Result<ParamOrderKey> key = MegatronParamOrder(cn.name, g.mamba_conv1d_module);
    if (key.status().code() == StatusCode::kNotFound) continue;
    if (!key.ok()) return key.status().WithContext("rank " + std::to_string(spec.rank));
    const bool expert = g.experts_separate && key->expert;
    chunks[{spec.rank, cn.chunk}].push_back({static_cast<int>(b), *key, expert, dtypes[b]});
  }
  std::vector<Move> moves(in.buffers.size());
  for (auto& [at, params] : chunks) {
    const auto [rank, chunk] = at;
    std::stable_sort(params.begin(), params.end(),
                     [](const Param& a, const Param& b) { return a.key < b.key; });
    // megatron/training/training.py: buckets only on chunk 0 of pipeline rank 0, and only with
    // --overlap-grad-reduce
    const bool buckets = g.overlap_grad_reduce && chunk == 0 &&
                         (rank - g.first_rank) / g.stage_size == 0;
    const int64_t bucket_size = buckets ? std::max<int64_t>(40000000, int64_t{1000000} * g.dp_cp) : 0;
    // group_params_for_buffers: groups in the order their first parameter appears
    std::vector<std::pair<DType, bool>> kinds;
    for (const Param& p : params) {
      if (std::find(kinds.begin(), kinds.end(), std::make_pair(p.dtype, p.expert)) == kinds.end()) {
        kinds.push_back({p.dtype, p.expert});
      }
    }
    int dense_k = 0, expert_k = 0;
    for (const auto& [dtype, expert] : kinds) {
      std::vector<Param> group;
      for (const Param& p : params) {
        if (p.dtype == dtype && p.expert == expert) group.push_back(p);
      }
      const std::string name =
          SplitChunk(in.buffers[static_cast<size_t>(group.front().buffer)].name).prefix +
          (expert ? "expert_parallel_buffers." + std::to_string(expert_k++)
                  : "buffers." + std::to_string(dense_k++)) +
          ".param_data";
      FERRY_RETURN_IF_ERROR(LayOutGroup(in, group, name, bucket_size,
                                        expert ? g.expert_dp : g.dp_cp, g, moves));
    }
  }
  return moves;
}

}  // namespace

Result<Layout> PackMegatronParamBuffers(const Layout& in, const MegatronBufferGroups& g) {
  if (g.stage_size < 1 || g.dp_cp < 1 || g.expert_dp < 1) {
    return InvalidArgument("Megatron buffer groups need positive stage, dp and expert-dp sizes");
  }
  FERRY_ASSIGN_OR_RETURN(const std::vector<Move> moves, PlanMoves(in, g));
  Layout out;
  for (const TensorSpec& t : in.tensors) FERRY_RETURN_IF_ERROR(out.AddTensor(t).status());
  out.padding = in.padding;
  out.transforms = in.transforms;
  std::vector<int> index(in.buffers.size());
  for (size_t b = 0; b < in.buffers.size(); ++b) {
    const BufferSpec& spec = in.buffers[b];
    const bool moved = !moves[b].name.empty();
    index[b] = out.GetOrAddBuffer(spec.rank, moved ? moves[b].name : spec.name);
    out.buffers.SetBytes(static_cast<size_t>(index[b]), moved ? moves[b].bytes : spec.bytes);
  }
  out.fragments.reserve(in.fragments.size());
  for (Fragment f : in.fragments) {
    f.loc.byte_offset += moves[static_cast<size_t>(f.loc.buffer)].shift;
    f.loc.buffer = index[static_cast<size_t>(f.loc.buffer)];
    out.fragments.push_back(f);
  }
  return out;
}

}  // namespace ferry::models
