// The SGLang layout of a model preset (tools/models/sglang_layout.h): SglangWriter builds one
// server's PP stages, each over its tp ranks (attention per attention group, the rest over all
// tp ranks, the experts by EP rank and FFN shard), then copies it to the other DP replicas and
// engines, or, with the servers' EPLB maps, copies all but the routed experts and places each
// server's experts by its own map. Paths are SGLang 0.5.23's, under python/sglang/srt.
#include "tools/models/sglang_layout.h"

#include <numeric>
#include <string>
#include <vector>

#include "core/layout/builders.h"
#include "tools/models/engine_writer.h"
#include "tools/models/eplb_map.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/layout_writer.h"
#include "tools/models/sglang_pipeline.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

class SglangWriter : public EngineWriter {
 public:
  SglangWriter(const ModelPreset& preset, const SglangParallel& s, bool stack_experts,
               int first_rank, Layout& out)
      : EngineWriter(preset, stack_experts, out, "mlp.experts."),
        s_(s),
        split_(SglangAttentionDpSplitOf(preset.config())),
        first_(first_rank) {}

  // Builds the first server's first replica (BuildServer), then copies it to the other DP
  // replicas and engines; with an EPLB map (eplb_map=), where each server's experts sit where its
  // own EPLB put them, copies all but the routed experts and builds each server's experts on its
  // own.
  Status Build() {
    FERRY_ASSIGN_OR_RETURN(stage_layers_, SglangPipelineLayers(c_.num_layers, s_.pp, s_.partition));
    if (s_.eplb_map.empty()) {
      FERRY_ASSIGN_OR_RETURN(const Section server, BuildServer());
      return CloneSection(out_, server, Shifts(s_.dp * s_.engines, s_.tp * s_.pp));
    }
    FERRY_ASSIGN_OR_RETURN(maps_, ReadSglangEplbMaps(s_.eplb_map, c_.num_layers, s_.engines,
                                                     c_.num_experts,
                                                     c_.num_experts + s_.redundant_experts));
    routed_experts_ = false;  // all but the routed experts: the same on every server
    FERRY_ASSIGN_OR_RETURN(const Section shared, BuildServer());
    FERRY_RETURN_IF_ERROR(CloneSection(out_, shared, Shifts(s_.engines, s_.tp * s_.pp)));
    routed_experts_ = true;
    const size_t experts_begin = out_.buffers.size();
    const int first = first_;
    for (int k = 0; k < s_.engines; ++k) {  // one replica a server (ResolveSglang: dp 1)
      first_ = first + k * s_.tp * s_.pp;
      map_ = &maps_[static_cast<size_t>(k)];
      Status st = ServerExperts();
      if (!st.ok()) return st.WithContext("sglang server " + Num(k));
    }
    // once over every server's experts: the store retypes the expert tensors the servers share
    if (!s_.fp8_block_weights) return Status::Ok();
    return StoreFp8BlockWeights(out_, experts_begin, fp8_experts_, Fp8ScaleFormat::kFloat32,
                                Fp8Engine::kSglang);
  }

 private:
  // One replica of a server on ranks first_.., stage by stage (its projections then stored as FP8
  // block-quantized with quant=fp8_block); returns its section.
  Result<Section> BuildServer() {
    Section server = BeginSection(out_);
    int64_t first_layer = 0;
    for (int stage = 0; stage < s_.pp; ++stage) {
      Status st = BuildStage(stage, first_layer);
      if (!st.ok()) return st.WithContext("sglang PP rank " + Num(stage));
      first_layer += stage_layers_[static_cast<size_t>(stage)];
    }
    if (s_.mtp > 0) FERRY_RETURN_IF_ERROR(NextnDraft().WithContext("sglang NextN draft"));
    if (s_.fp8_block_weights) {
      FERRY_RETURN_IF_ERROR(StoreFp8BlockWeights(out_, server.buffers_begin, fp8_experts_,
                                                 Fp8ScaleFormat::kFloat32, Fp8Engine::kSglang));
    }
    EndSection(out_, server);
    return server;
  }

  // The routed experts of the server on ranks first_.. (its EPLB map in map_).
  Status ServerExperts() {
    int64_t first_layer = 0;
    for (int stage = 0; stage < s_.pp; ++stage) {
      UseStage(stage);
      const int64_t end_layer = first_layer + stage_layers_[static_cast<size_t>(stage)];
      Status st = StageExperts(first_layer, end_layer);
      if (!st.ok()) return st.WithContext("sglang PP rank " + Num(stage));
      first_layer = end_layer;
    }
    if (s_.mtp == 0) return Status::Ok();
    UseStage(s_.pp - 1);
    return Experts(c_.num_layers, "model.decoder.", 0).WithContext("sglang NextN draft");
  }

  // The routed experts of decoder layers [first_layer, end_layer) on the stage in use.
  Status StageExperts(int64_t first_layer, int64_t end_layer) {
    for (int64_t l = first_layer; l < end_layer; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, "model.layers." + Num(l) + ".", l);
      if (!st.ok()) return st.WithContext("sglang experts of layer " + Num(l));
    }
    return Status::Ok();
  }

  // Makes all_ the tp ranks of PP rank `stage` (runtime_context.py spawn_world_rank: world rank
  // tp_size * pp_rank + tp_rank), groups_ their attention-DP groups and attention_ the groups the
  // model class splits attention over.
  void UseStage(int stage) {
    all_.resize(static_cast<size_t>(s_.tp));
    std::iota(all_.begin(), all_.end(), first_ + stage * s_.tp);
    groups_.clear();
    const int attn = SglangAttentionTp(s_);
    for (int head = 0; head < s_.tp; head += attn) {
      groups_.emplace_back(all_.begin() + head, all_.begin() + head + attn);
    }
    attention_ = split_.attention ? groups_ : std::vector<std::vector<int>>{all_};
  }

  // PP rank `stage`: its model-level modules (SglangModulesOnStage), decoder layers from
  // `first_layer` on (utils/common.py make_layers: PPMissingLayer elsewhere), and their experts.
  Status BuildStage(int stage, int64_t first_layer) {
    UseStage(stage);
    const SglangStageModules holds = SglangModulesOnStage(c_, stage, s_.pp);
    if (holds.embed_tokens) FERRY_RETURN_IF_ERROR(Embedding());
    const int64_t end_layer = first_layer + stage_layers_[static_cast<size_t>(stage)];
    for (int64_t l = first_layer; l < end_layer; ++l) {
      Status st = Layer(l, "model.layers." + Num(l) + ".");
      if (!st.ok()) return st.WithContext("sglang layer " + Num(l));
    }
    if (holds.norm) {
      FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), all_, "model.norm.weight"));
    }
    // ParallelLMHead(use_attn_tp_group=enable_dp_lm_head); tied, from embed_tokens' tensor
    if (holds.lm_head) {
      FERRY_RETURN_IF_ERROR(
          VocabOver(OutputName(), s_.dp_lm_head && split_.lm_head, "lm_head.weight"));
    }
    return routed_experts_ ? StageExperts(first_layer, end_layer) : Status::Ok();
  }

  // The NextN draft's own weights on every rank of the last PP stage (managers/scheduler.py:
  // "non-last stages have no draft worker"), named as models/deepseek_nextn.py
  // DeepseekV3ForCausalLMNextN names them: model.enorm, model.hnorm (RMSNorm), model.eh_proj (an
  // nn.Linear, whole on every rank), model.shared_head.norm, and model.decoder, a
  // DeepseekV2DecoderLayer sharded as the target's MoE layers. deepseek_common/
  // deepseek_weight_loader.py loads them from the checkpoint's model.layers.<num_layers>.* (the
  // decoder's under model.decoder) and skips that layer's embed_tokens and shared_head.head: the
  // draft's lm_head is the target's (speculative/eagle_worker_v2.py set_embed_and_head), and so
  // is its embed_tokens without PP. With PP the last stage has no embed_tokens of the target's,
  // and the draft keeps its own, loaded at start from the checkpoint's model.embed_tokens and
  // split as the target's (speculative/pp_draft_embedding.py load_draft_embedding_from_checkpoint),
  // which SGLang's loader then never updates; ferry writes it every refit, as a server started
  // from that checkpoint would hold it. The decoder is built as layer 0 (DeepseekV2DecoderLayer(
  // config, 0, is_nextn=True)), so its experts follow row 0 of the server's EPLB map: the draft
  // reads the target's ExpertLocationMetadata (model_runner.py sets none for a draft worker).
  Status NextnDraft() {
    UseStage(s_.pp - 1);
    if (s_.pp > 1) {
      if (SglangModulesOnStage(c_, s_.pp - 1, s_.pp).embed_tokens) {
        return Internal("the target's embed_tokens and the NextN draft's on one PP rank");
      }
      FERRY_RETURN_IF_ERROR(Embedding());
    }
    const int64_t l = c_.num_layers;
    for (const char* part : {"enorm.weight", "hnorm.weight", "eh_proj.weight",
                             "shared_head.norm.weight"}) {
      FERRY_RETURN_IF_ERROR(
          Replicated(MtpTensorName(c_, 0, part), all_, std::string("model.") + part));
    }
    FERRY_RETURN_IF_ERROR(Layer(l, "model.decoder."));
    return routed_experts_ ? Experts(l, "model.decoder.", 0) : Status::Ok();
  }

  // layers/vocab_parallel_embedding.py VocabParallelEmbedding: the padded vocabulary
  // (SglangPaddedVocab) in equal row blocks over its group. embed_tokens takes the attention-TP
  // group under attention DP where the model class says so (SglangAttentionDpSplitOf), else the
  // TP group.
  Status Embedding() {
    return VocabOver(EmbeddingName(), s_.attn_dp > 1 && split_.embed_tokens,
                     "model.embed_tokens.weight");
  }

  // `hf_name`'s padded rows split over each attention group (`attention_groups`) or over all tp
  // ranks, in `buffer`.
  Status VocabOver(const std::string& hf_name, bool attention_groups, const std::string& buffer) {
    if (!attention_groups) {
      FERRY_ASSIGN_OR_RETURN(const int64_t padded, SglangPaddedVocab(c_.vocab, s_.tp));
      return Vocab(hf_name, all_, padded / s_.tp, buffer);
    }
    const int attn = SglangAttentionTp(s_);
    FERRY_ASSIGN_OR_RETURN(const int64_t padded, SglangPaddedVocab(c_.vocab, attn));
    for (const std::vector<int>& group : groups_) {
      FERRY_RETURN_IF_ERROR(Vocab(hf_name, group, padded / attn, buffer));
    }
    return Status::Ok();
  }

  // A decoder layer: norms on every rank (RMSNorm), attention per attention group where the model
  // class builds it with parallel_group="attn_tp" (SglangAttentionDpSplitOf), else over all tp
  // ranks, then the MLP.
  Status Layer(int64_t l, const std::string& p) {
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, "input_layernorm.weight"), all_, p + "input_layernorm.weight"));
    for (const std::vector<int>& group : attention_) {
      FERRY_RETURN_IF_ERROR(c_.IsMla()
                                ? MlaAttention(l, p, group, "fused_qkv_a_proj_with_mqa.weight")
                                : GqaAttention(l, p, "self_attn.", group));
    }
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "post_attention_layernorm.weight"), all_,
                                     p + "post_attention_layernorm.weight"));
    if (c_.IsMoeLayer(l)) return Moe(l, p);
    // models/deepseek_v2.py DeepseekV2DecoderLayer: parallel_group "replicated" when
    // is_dense_ffn_fully_dp() (--moe-dense-tp-size 1), whole on every rank; else "tp"
    if (s_.dense_tp == 1) return DenseMlpOnEachRank(l, p + "mlp.", "mlp.");
    return DenseMlp(l, p + "mlp.", "mlp.", all_);
  }

  // DenseMlp whole on every rank of the stage (parallel_group "replicated").
  Status DenseMlpOnEachRank(int64_t l, const std::string& buffer_prefix,
                            const std::string& module) {
    for (int rank : all_) FERRY_RETURN_IF_ERROR(DenseMlp(l, buffer_prefix, module, {rank}));
    return Status::Ok();
  }

  // layers/linear.py MergedColumnParallelLinear gate_up_proj = [gate shard; up shard],
  // RowParallelLinear down_proj, over `ranks`.
  Status DenseMlp(int64_t l, const std::string& buffer_prefix, const std::string& module,
                  const std::vector<int>& ranks) {
    FERRY_RETURN_IF_ERROR(GateUp(H(l, module + "gate_proj.weight"), H(l, module + "up_proj.weight"),
                                 ranks, buffer_prefix + "gate_up_proj.weight"));
    return Row(H(l, module + "down_proj.weight"), ranks, buffer_prefix + "down_proj.weight");
  }

  // The router on every rank (models/qwen3_moe.py: a ReplicatedLinear gate; models/deepseek_v2.py
  // MoEGate: a whole weight and the fp32 e_score_correction_bias) and, unless fused into the
  // experts, the shared expert: DeepseekV2MLP with parallel_group "tp", or "replicated" (whole on
  // every rank) under an all-to-all backend (_shared_expert_use_tp1).
  Status Moe(int64_t l, const std::string& p) {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.weight"), all_, p + "mlp.gate.weight"));
    if (c_.router_bias) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.e_score_correction_bias"), all_,
                                       p + "mlp.gate.e_score_correction_bias"));
    }
    if (c_.num_shared_experts == 0 || s_.shared_fused == 1) return Status::Ok();
    const std::string shared = p + "mlp.shared_experts.";
    if (s_.a2a == "none") return DenseMlp(l, shared, "mlp.shared_experts.", all_);
    return DenseMlpOnEachRank(l, shared, "mlp.shared_experts.");
  }

  // layers/moe/fused_moe_triton/layer.py FusedMoE over the server's tp ranks: EP rank
  // tp_rank / moe_tp holds routed (and redundant) experts [ep_rank * R/ep, (ep_rank + 1) * R/ep)
  // (_map_global_expert_id_to_local_expert_id), FFN shard tp_rank % moe_tp (runtime_context.py:
  // moe_ep_rank = tp_rank // moe_tp, moe_tp_rank = tp_rank % moe_tp); a fused shared expert
  // follows them. Each physical expert holds the logical one the server's EPLB map names for
  // layer `map_layer` (FusedMoE.layer_id; eplb/expert_location.py logical_to_all_physical), or
  // init_trivial's without a map.
  Status Experts(int64_t l, const std::string& p, int64_t map_layer) {
    const int64_t moe_tp = s_.tp / s_.ep;
    const int64_t routed = (c_.num_experts + s_.redundant_experts) / s_.ep;
    const int64_t slots = routed + (s_.shared_fused == 1 ? c_.num_shared_experts : 0);
    const ExpertGeometry g{c_.moe_intermediate / moe_tp, c_.hidden, DTypeSize(c_.dtype)};
    FERRY_ASSIGN_OR_RETURN(const std::vector<ExpertIds> ids, AddExpertTensors(l));
    for (int64_t m = 0; m < s_.tp; ++m) {
      const int rank = all_[static_cast<size_t>(m)];
      const int64_t ep_rank = m / moe_tp;
      PlacePhysicalExperts(p, ids, g, rank, m % moe_tp, ep_rank * routed, routed, slots,
                           map_ == nullptr ? nullptr : &(*map_)[static_cast<size_t>(map_layer)]);
      if (slots > routed) FERRY_RETURN_IF_ERROR(FusedShared(l, p, g, rank, m % moe_tp, routed));
    }
    return Status::Ok();
  }

  // models/deepseek_common/deepseek_weight_loader.py renames mlp.shared_experts to
  // mlp.experts.<n_routed_experts>, which FusedMoE puts after the rank's routed experts: the
  // shared expert's FFN shard `shard` is local expert `slot` of w13_weight ([gate; up] rows) and
  // w2_weight (down_proj's columns).
  Status FusedShared(int64_t l, const std::string& p, const ExpertGeometry& g, int rank,
                     int64_t shard, int64_t slot) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* gate,
                           LayerTensor(l, "mlp.shared_experts.gate_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* up,
                           LayerTensor(l, "mlp.shared_experts.up_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* down,
                           LayerTensor(l, "mlp.shared_experts.down_proj.weight"));
    const int64_t lo = shard * g.inter, hi = (shard + 1) * g.inter;
    FERRY_RETURN_IF_ERROR(AddFusedConcat(out_, rank, p + "mlp.experts.w13_weight",
                                         {{*gate, Rows(*gate, lo, hi)}, {*up, Rows(*up, lo, hi)}},
                                         0, slot * 2 * g.inter * g.hidden * g.elem));
    Box cols = Box::FromShape(down->shape);
    cols.lo[1] = lo;
    cols.hi[1] = hi;
    return AddFusedConcat(out_, rank, p + "mlp.experts.w2_weight", {{*down, cols}}, 1,
                          slot * g.hidden * g.inter * g.elem);
  }

  SglangParallel s_;
  SglangAttentionDpSplit split_;          // what attention DP splits over the attention group
  int first_;                             // the first rank of the server being built
  std::vector<EplbMap> maps_;             // the servers' EPLB maps (eplb_map=), else none
  const EplbMap* map_ = nullptr;          // the map of the server being built
  bool routed_experts_ = true;            // whether BuildServer builds the routed experts
  std::vector<int64_t> stage_layers_;     // decoder layers per PP rank (sglang_pipeline.h)
  std::vector<int> all_;                  // the tp ranks of the stage being built (UseStage)
  std::vector<std::vector<int>> groups_;  // its attention-DP groups, consecutive runs of all_
  std::vector<std::vector<int>> attention_;  // groups_, or all_ alone (UseStage)
};

}  // namespace

Status BuildSglangLayout(const ModelPreset& preset, const SglangParallel& resolved,
                         bool stack_expert_tensors, int first_rank, Layout& out) {
  return SglangWriter(preset, resolved, stack_expert_tensors, first_rank, out).Build();
}

}  // namespace ferry::models
