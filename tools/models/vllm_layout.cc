// The vLLM layout of a model preset (tools/models/vllm_layout.h): VllmWriter builds DP replica 0
// (every PP stage's TP group) with core/layout's builders, places the routed experts on every rank
// of the engine, then copies replica 0 to the other DP ranks and the whole engine to the other
// engines.
#include "tools/models/vllm_layout.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/layout/builders.h"
#include "tools/models/engine_writer.h"
#include "tools/models/eplb_map.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/layout_writer.h"
#include "tools/models/vllm_pipeline.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

class VllmWriter : public EngineWriter {
 public:
  VllmWriter(const ModelPreset& preset, const VllmParallel& v, bool stack_experts, int first_rank,
             Layout& out)
      : EngineWriter(preset, stack_experts, out, "mlp.experts.routed_experts."),
        v_(v),
        first_(first_rank) {}

  // Builds DP replica 0 of everything but the routed experts with the builders, the experts on
  // all tp*dp ranks, then copies replica 0 to the other DP ranks, then the whole engine to the
  // other engines.
  Status Build() {
    FERRY_ASSIGN_OR_RETURN(stage_layers_, VllmPipelineLayers(c_.num_layers, v_.pp, v_.partition));
    FERRY_RETURN_IF_ERROR(LoadEplbMap());
    Section engine = BeginSection(out_);
    FERRY_RETURN_IF_ERROR(BuildEngine());
    if (v_.fp8_block_weights) {
      FERRY_RETURN_IF_ERROR(StoreFp8BlockWeights(out_, engine.buffers_begin, fp8_experts_, v_.fp8_scale_fmt));
    }
    EndSection(out_, engine);
    return CloneSection(out_, engine, Shifts(v_.engines, v_.tp * v_.pp * v_.dp));
  }

 private:
  // The global rank of TP rank `tp_rank` of PP stage `stage` in DP replica `dp_rank`: vLLM orders
  // ranks ExternalDP x DP x PP x PCP x TP (vllm/distributed/parallel_state.py
  // initialize_model_parallel), the engines being ferry's external DP.
  int RankOf(int64_t dp_rank, int64_t stage, int64_t tp_rank) const {
    return first_ + static_cast<int>((dp_rank * v_.pp + stage) * v_.tp + tp_rank);
  }

  // Makes all_ the TP group of PP stage `stage` of DP replica 0.
  void UseStage(int stage) {
    all_.resize(static_cast<size_t>(v_.tp));
    std::iota(all_.begin(), all_.end(), RankOf(0, stage, 0));
  }

  // The PP stage holding decoder layer l (vllm/model_executor/models/utils.py make_layers: stage
  // s builds layers [sum of the earlier stages' counts, + its count), PPMissingLayer elsewhere).
  int StageOf(int64_t l) const {
    int64_t end = 0;
    for (size_t s = 0; s < stage_layers_.size(); ++s) {
      end += stage_layers_[s];
      if (l < end) return static_cast<int>(s);
    }
    return v_.pp - 1;
  }

  // DP replica 0 of one PP stage: its model-level modules (tools/models/vllm_pipeline.h
  // VllmModulesOnStage) and decoder layers.
  Status BuildStage(int stage, int64_t first_layer, int64_t padded) {
    UseStage(stage);
    const VllmStageModules holds = VllmModulesOnStage(c_, stage, v_.pp);
    if (holds.embed_tokens) {
      // vllm/model_executor/layers/vocab_parallel_embedding.py: num_embeddings_per_partition rows
      FERRY_RETURN_IF_ERROR(
          Vocab(EmbeddingName(), all_, padded / v_.tp, "model.embed_tokens.weight"));
    }
    const int64_t end_layer = first_layer + stage_layers_[static_cast<size_t>(stage)];
    for (int64_t l = first_layer; l < end_layer; ++l) {
      Status st = Layer(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("vllm layer " + Num(l));
    }
    if (holds.norm) {
      FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), all_,
                                       c_.family == ModelFamily::kNemotronH ? "model.norm_f.weight"
                                                                            : "model.norm.weight"));
    }
    // vllm/model_executor/models/llama.py: tied, lm_head is embed_tokens (tie_weights), one buffer
    if (holds.lm_head) {
      // vllm/model_executor/layers/vocab_parallel_embedding.py ParallelLMHead: the embedding's split
      FERRY_RETURN_IF_ERROR(Vocab(OutputName(), all_, padded / v_.tp, "lm_head.weight"));
    }
    return Status::Ok();
  }

  Status BuildEngine() {
    Section dense = BeginSection(out_);
    FERRY_ASSIGN_OR_RETURN(const int64_t padded, VllmPaddedVocab(c_.vocab, v_.tp));
    int64_t first_layer = 0;
    for (int stage = 0; stage < v_.pp; ++stage) {
      Status st = BuildStage(stage, first_layer, padded);
      if (!st.ok()) return st.WithContext("vllm PP rank " + Num(stage));
      first_layer += stage_layers_[static_cast<size_t>(stage)];
    }
    FERRY_RETURN_IF_ERROR(Drafter(padded));
    EndSection(out_, dense);
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c_.num_layers + v_.mtp; ++l) moe_layers += c_.IsMoeLayer(l) ? 1 : 0;
    const int64_t world = static_cast<int64_t>(v_.tp) * v_.dp;
    const int64_t expert_fragments =
        moe_layers * world * (stack_experts_ ? 1 : c_.num_experts / v_.ep) * 3;
    const size_t dense_fragments = dense.fragments_end - dense.fragments_begin;
    out_.fragments.reserve(out_.fragments.size() + static_cast<size_t>(expert_fragments) +
                           dense_fragments * static_cast<size_t>(v_.dp - 1));
    out_.buffers.reserve(out_.buffers.size() + static_cast<size_t>(moe_layers * world * 2) +
                         (dense.buffers_end - dense.buffers_begin) * static_cast<size_t>(v_.dp - 1));
    // vllm/distributed/parallel_state.py: a PP stage's EP group is its tp*dp ranks
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("vllm experts of layer " + Num(l));
    }
    for (int64_t l = c_.num_layers; l < c_.num_layers + v_.mtp; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, "model.layers." + Num(l) + ".mtp_block.");
      if (!st.ok()) return st.WithContext("vllm experts of MTP layer " + Num(l));
    }
    return CloneSection(out_, dense, Shifts(v_.dp, v_.tp * v_.pp));
  }

  // The speculative-decoding drafter (DP replica 0, routed experts aside): the engine's last PP
  // rank builds it (vllm/v1/worker/gpu_model_runner.py: "we put the entire draft model on the
  // last PP rank"), all its MTP layers (deepseek_mtp.py builds them without make_layers). Without
  // PP it shares the target's embed_tokens; with PP it keeps the one it loads itself, the
  // checkpoint's copy (model.layers.<L>.embed_tokens, identical to model.embed_tokens) renamed
  // model.embed_tokens by deepseek_mtp.py _rewrite_spec_layer_name, a VocabParallelEmbedding split
  // over TP as the target's (vllm/v1/spec_decode/llm_base_proposer.py _maybe_share_embeddings:
  // sharing only when the PP group has one rank). Its shared_head.head is the target's lm_head
  // at any pp (_maybe_share_lm_head: an MTP drafter always shares it).
  Status Drafter(int64_t padded) {
    if (v_.mtp == 0) return Status::Ok();
    const int last = v_.pp - 1;
    UseStage(last);
    if (v_.pp > 1) {
      if (VllmModulesOnStage(c_, last, v_.pp).embed_tokens) {
        return Internal("the target's embed_tokens and the MTP drafter's on one PP rank");
      }
      FERRY_RETURN_IF_ERROR(
          Vocab(EmbeddingName(), all_, padded / v_.tp, "model.embed_tokens.weight"));
    }
    for (int64_t i = 0; i < v_.mtp; ++i) {
      Status st = MtpLayer(i);
      if (!st.ok()) return st.WithContext("vllm MTP layer " + Num(i));
    }
    return Status::Ok();
  }

  // The drafter's MTP layer i (DP replica 0, routed experts aside), named as its parameters are:
  // vllm/model_executor/models/deepseek_mtp.py DeepSeekMultiTokenPredictor.layers keyed by the
  // checkpoint's layer number num_layers + i; DeepSeekMultiTokenPredictorLayer: enorm and hnorm
  // (RMSNorm), eh_proj a replicated linear (the whole [h, 2h] on every rank), shared_head.norm,
  // and mtp_block a DeepseekV2DecoderLayer sharded as the target's layers (_rewrite_spec_layer_name
  // puts the checkpoint's layer weights under mtp_block). shared_head.head and embed_tokens are the
  // target's lm_head and (without PP) embed_tokens (Drafter), so they hold no bytes of their own.
  Status MtpLayer(int64_t i) {
    const int64_t l = c_.num_layers + i;
    const std::string p = "model.layers." + Num(l) + ".";
    FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "enorm.weight"), all_, p + "enorm.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "hnorm.weight"), all_, p + "hnorm.weight"));
    FERRY_RETURN_IF_ERROR(
        Replicated(MtpTensorName(c_, i, "eh_proj.weight"), all_, p + "eh_proj.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "shared_head.norm.weight"), all_,
                                     p + "shared_head.norm.weight"));
    return Layer(l, p + "mtp_block.");
  }

  Status Layer(int64_t l, const std::string& p) {
    switch (c_.KindOfLayer(l)) {
      case LayerKind::kDecoder: {
        FERRY_RETURN_IF_ERROR(
            Replicated(H(l, "input_layernorm.weight"), all_, p + "input_layernorm.weight"));
        FERRY_RETURN_IF_ERROR(c_.IsMla() ? MlaAttention(l, p, all_, "fused_qkv_a_proj.weight")
                                          : GqaAttention(l, p, "self_attn.", all_));
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "post_attention_layernorm.weight"), all_,
                                         p + "post_attention_layernorm.weight"));
        if (c_.IsMoeLayer(l)) return Moe(l, p);
        // vllm/model_executor/layers/linear.py MergedColumnParallelLinear: [gate_i; up_i]
        FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.gate_proj.weight"), H(l, "mlp.up_proj.weight"), all_,
                                     p + "mlp.gate_up_proj.weight"));
        return Row(H(l, "mlp.down_proj.weight"), all_, p + "mlp.down_proj.weight");
      }
      case LayerKind::kAttention:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        return GqaAttention(l, p, "mixer.", all_);
      case LayerKind::kMlp:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        FERRY_RETURN_IF_ERROR(Column(H(l, "mixer.up_proj.weight"), all_, p + "mixer.up_proj.weight"));
        return Row(H(l, "mixer.down_proj.weight"), all_, p + "mixer.down_proj.weight");
      case LayerKind::kMamba:
        FERRY_RETURN_IF_ERROR(Replicated(H(l, "norm.weight"), all_, p + "norm.weight"));
        FERRY_RETURN_IF_ERROR(
            MambaMixer(l, all_, [&](const std::string& x) { return p + "mixer." + x; }, "A"));
        return MarkMambaA(l, p + "mixer.A");
    }
    return Internal("unknown layer kind");
  }

  // vllm/model_executor/layers/mamba/mamba_mixer2.py: A is an fp32 parameter of heads/tp values
  // loaded as -exp(A_log): the buffer holds fp32 values of another meaning than A_log's bytes.
  Status MarkMambaA(int64_t l, const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* a_log, LayerTensor(l, "mixer.A_log"));
    const int t = out_.FindTensor(a_log->name);
    if (t < 0) return Internal("'" + a_log->name + "' was not placed");
    out_.transforms.push_back({t, "A = -exp(A_log)", DType::kFP32});
    for (int rank : all_) {
      const int b = out_.FindBuffer(rank, buffer);
      if (b < 0) return Internal("no buffer '" + buffer + "' on rank " + Num(rank));
      out_.buffers.SetBytes(static_cast<size_t>(b),
                            c_.mamba_num_heads / v_.tp * DTypeSize(DType::kFP32));
    }
    return Status::Ok();
  }

  // The MoE layer's router and shared expert (DP replica 0).
  // vllm/model_executor/models/deepseek_v2.py DeepseekV2MoE: gate a ReplicatedLinear with the
  // fp32 e_score_correction_bias, shared experts a TP-split MLP over the engine's TP group, or
  // whole on every rank under sequence-parallel MoE (DeepseekV2MLP's disable_tp).
  Status Moe(int64_t l, const std::string& p) {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.weight"), all_, p + "mlp.gate.weight"));
    if (c_.router_bias) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.e_score_correction_bias"), all_,
                                       p + "mlp.gate.e_score_correction_bias"));
    }
    if (c_.num_shared_experts == 0) return Status::Ok();
    std::vector<std::vector<int>> groups{all_};
    if (SequenceParallelMoe()) {
      groups.clear();
      for (int rank : all_) groups.push_back({rank});
    }
    for (const std::vector<int>& group : groups) {
      FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.shared_experts.gate_proj.weight"),
                                   H(l, "mlp.shared_experts.up_proj.weight"), group,
                                   p + "mlp.shared_experts.gate_up_proj.weight"));
      FERRY_RETURN_IF_ERROR(Row(H(l, "mlp.shared_experts.down_proj.weight"), group,
                                p + "mlp.shared_experts.down_proj.weight"));
    }
    return Status::Ok();
  }

  // vllm/config/parallel.py ParallelConfig.use_sequence_parallel_moe: expert parallelism with
  // tp > 1 and dp > 1 under the default all-to-all backend (allgather_reducescatter, which the
  // layouts assume) keeps the tokens, and so the shared experts' weights, whole on each rank.
  bool SequenceParallelMoe() const { return v_.ep > 1 && v_.tp > 1 && v_.dp > 1; }

  // FusedMoE over all tp*dp ranks. Without expert parallelism (ep = 1) every rank m holds shard m
  // of every expert's FFN; with it (ep = tp*dp) rank m holds whole experts, ep rank m's share.
  // w13_weight is [local experts, 2 * I / moe_tp, hidden] with [gate shard; up shard] per expert,
  // w2_weight is [local experts, hidden, I / moe_tp]. As tensor stacks, each rank holds one
  // fragment of each projection's stack, spanning its local experts with the buffers' own strides;
  // as members, one per expert. With members this loop places most of a large MoE layout's
  // fragments, so it writes them straight into each rank's two buffers instead of going through
  // the builders.
  Status Experts(int64_t l, const std::string& p) {
    const int64_t world = static_cast<int64_t>(v_.tp) * v_.dp;
    // vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make: ep = 1 flattens
    // TP over tp*dp (rank dp_rank*tp + tp_rank); ep = tp*dp gives each rank whole experts
    const int64_t moe_tp = world / v_.ep;
    ExpertGeometry g{c_.moe_intermediate / moe_tp, c_.hidden, DTypeSize(c_.dtype)};
    FERRY_ASSIGN_OR_RETURN(const std::vector<ExpertIds> ids, AddExpertTensors(l));
    // vllm/model_executor/layers/fused_moe/layer.py: with EPLB the layer's global experts are the
    // physical ones, logical + redundant
    const int64_t physical = c_.num_experts + v_.redundant_experts;
    const int stage = l < c_.num_layers ? StageOf(l) : v_.pp - 1;  // MTP: the drafter's stage
    const std::vector<int32_t>* arranged = ArrangedRow(l, stage);
    for (int64_t m = 0; m < world; ++m) {
      const int64_t ep_rank = m / moe_tp;
      // vllm/model_executor/layers/fused_moe/expert_map_manager.py determine_expert_map, "linear":
      // the first num_experts % ep ranks take one expert more
      const int64_t base = physical / v_.ep;
      const int64_t extra = physical % v_.ep;
      const int64_t count = base + (ep_rank < extra ? 1 : 0);
      if (count == 0) continue;  // an EP rank without experts holds empty weights
      // vllm/distributed/parallel_state.py: the EP group of a PP stage is DP x TP of that stage
      const int rank = RankOf(m / v_.tp, stage, m % v_.tp);
      if (v_.round_robin_experts) {
        // "round_robin": experts ep_rank, ep_rank + ep, ... (torch.arange(ep_rank, E, ep))
        PlaceRankExperts(p, ids, g, {rank, m % moe_tp, ep_rank, count, v_.ep, 0, count});
        continue;
      }
      const int64_t start = ep_rank * base + std::min(ep_rank, extra);
      PlacePhysicalExperts(p, ids, g, rank, m % moe_tp, start, count, count, arranged);
    }
    return Status::Ok();
  }

  // The first decoder layer of PP stage `stage`.
  int64_t FirstLayerOf(int stage) const {
    int64_t first = 0;
    for (int s = 0; s < stage; ++s) first += stage_layers_[static_cast<size_t>(s)];
    return first;
  }

  // The map's row of decoder layer l on its PP stage: the stage's MoE layers numbered from 0 in
  // model order, as that rank's EplbState numbers them (qwen3_moe.py Qwen3MoeForCausalLM
  // set_eplb_state: moe_layer_idx over its own moe_layers).
  size_t MoeIndexOnStage(int64_t l, int stage) const {
    size_t index = 0;
    for (int64_t k = FirstLayerOf(stage); k < l; ++k) index += c_.IsMoeLayer(k) ? 1 : 0;
    return index;
  }

  // The MoE layers of the MTP drafter, numbered from 0 in MTP layer order up to MTP layer l
  // (excluded): its EplbState rows (deepseek_mtp.py DeepSeekMTP.set_moe_parameters).
  size_t DrafterMoeIndex(int64_t l) const {
    size_t index = 0;
    for (int64_t k = c_.num_layers; k < l; ++k) index += c_.IsMoeLayer(k) ? 1 : 0;
    return index;
  }

  // The EPLB map's row for MoE layer l on PP stage `stage`, or nullptr for the initial
  // arrangement: a target layer's row in its stage's map, an MTP layer's in the drafter's own map
  // (vllm/v1/worker/gpu_model_runner.py: EplbState.add_model for the drafter).
  const std::vector<int32_t>* ArrangedRow(int64_t l, int stage) const {
    if (eplb_.pp_ranks.empty()) return nullptr;
    if (l >= c_.num_layers) return &eplb_.drafter[DrafterMoeIndex(l)];
    return &eplb_.pp_ranks[static_cast<size_t>(stage)][MoeIndexOnStage(l, stage)];
  }

  // Reads v_.eplb_map, when given: one map per PP stage over its MoE layers and physical experts,
  // and the drafter's over its MoE layers.
  Status LoadEplbMap() {
    if (v_.eplb_map.empty()) return Status::Ok();
    const int64_t drafter_moe =
        static_cast<int64_t>(DrafterMoeIndex(c_.num_layers + v_.mtp));
    FERRY_ASSIGN_OR_RETURN(eplb_, ReadEplbMaps(v_.eplb_map, VllmStageMoeLayers(c_, stage_layers_),
                                               drafter_moe, c_.num_experts,
                                               c_.num_experts + v_.redundant_experts));
    return Status::Ok();
  }

  VllmParallel v_;
  EplbMaps eplb_;  // the target's by PP stage, the drafter's; none: the initial arrangement
  int first_;
  std::vector<int64_t> stage_layers_;  // decoder layers per PP stage (vllm_pipeline.h)
  std::vector<int> all_;  // the TP group of DP replica 0 of the stage being built
};

}  // namespace

Status BuildVllmLayout(const ModelPreset& preset, const VllmParallel& resolved,
                       bool stack_expert_tensors, int first_rank, Layout& out) {
  return VllmWriter(preset, resolved, stack_expert_tensors, first_rank, out).Build();
}

}  // namespace ferry::models
