// The rules behind an SGLang layout's fragments (tools/models/sglang_explain.h), matched on the
// checkpoint name.
#include "tools/models/sglang_explain.h"

#include <cstdlib>

#include "tools/models/fp8_block_weights.h"
#include "tools/models/sglang_pipeline.h"

namespace ferry::models {

namespace {

// SGLang 0.5.23's sources, as the PyPI wheel sglang-0.5.23 ships them.
const std::string kSglang = "sgl-project/sglang v0.5.23 python/sglang/srt/";

bool Has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

std::string N(int64_t v) { return std::to_string(v); }

// The model class's file under python/sglang/srt: a dense model is SGLang's Qwen3 with q/k norms,
// Qwen2 with q/k/v biases, else Llama.
std::string ModelPath(const ModelConfig& c) {
  return c.family == ModelFamily::kQwen3Moe     ? "models/qwen3_moe.py"
         : c.family == ModelFamily::kDeepseekV3 ? "models/deepseek_v2.py"
         : c.qk_norm                            ? "models/qwen3.py"
         : c.qkv_bias                           ? "models/qwen2.py"
                                                : "models/llama.py";
}

std::string ModelFile(const ModelConfig& c) { return kSglang + ModelPath(c); }

// embed_tokens and lm_head: padded, then split over the ranks that share them.
void VocabRules(const ModelConfig& c, const SglangParallel& s, const std::string& t,
                std::vector<LayoutRule>& out) {
  const bool embed = Has(t, "embed");
  const SglangAttentionDpSplit by_class = SglangAttentionDpSplitOf(c);
  const bool over_groups =
      embed ? s.attn_dp > 1 && by_class.embed_tokens : s.dp_lm_head && by_class.lm_head;
  const int split = over_groups ? SglangAttentionTp(s) : s.tp;
  out.push_back({"vocabulary padded to a multiple of 64 (of 64 x " + N(split) +
                     " if 64 does not divide), then split into " + N(split) +
                     " equal row blocks; padding rows at the end",
                 kSglang + "layers/vocab_parallel_embedding.py"});
  if (over_groups) {
    out.push_back({std::string(embed ? "attention DP: embed_tokens" : "dp_lm_head: lm_head") +
                       " split over each attention group of " + N(split) +
                       " ranks (use_attn_tp_group)",
                   ModelFile(c)});
  }
  if (c.tie_embeddings) {
    const bool own = s.pp > 1 && SglangModulesOnStage(c, s.pp - 1, s.pp).lm_head;
    out.push_back({own ? "tied with pp > 1: the last PP rank's own lm_head, loaded from "
                         "embed_tokens"
                       : "tied: lm_head is embed_tokens, one buffer",
                   ModelFile(c)});
  }
}

void AttentionRules(const ModelConfig& c, const SglangParallel& s, std::vector<LayoutRule>& out) {
  const int attn = SglangAttentionTp(s);
  out.push_back({s.attn_dp > 1 && SglangAttentionDpSplitOf(c).attention
                     ? "attention DP: attention split over groups of tp/attn_dp = " + N(attn) +
                           " consecutive ranks, replicated across the " + N(s.attn_dp) + " groups"
                     : "attention split over the server's tp=" + N(s.tp) + " ranks",
                 kSglang + "runtime_context.py, " + ModelPath(c)});
  if (c.IsMla()) {
    out.push_back(
        {"MLA: fused_qkv_a_proj_with_mqa = [q_a_proj; kv_a_proj_with_mqa] replicated, "
         "q_b_proj and kv_b_proj column-parallel by head, o_proj row-parallel; w_kc and "
         "w_vc are copies that post_load_weights derives from kv_b_proj",
         kSglang + "models/deepseek_v2.py"});
    return;
  }
  out.push_back(
      {"qkv_proj = [q shard; k shard; v shard] per rank, KV heads replicated when the "
       "group exceeds them; o_proj row-parallel",
       kSglang + "layers/linear.py"});
}

void ExpertRules(const ModelConfig& c, const SglangParallel& s, const std::string& t,
                 std::vector<LayoutRule>& out) {
  const int moe_tp = s.tp / s.ep;
  out.push_back({"FusedMoE over the server's " + N(s.tp) + " ranks: EP rank tp_rank / " +
                     N(moe_tp) + " holds a contiguous block of " +
                     N((c.num_experts + s.redundant_experts) / s.ep) +
                     " routed experts, FFN shard tp_rank % " + N(moe_tp) +
                     "; w13_weight = [gate; up] per expert, w2_weight its down_proj columns",
                 kSglang + "layers/moe/fused_moe_triton/layer.py"});
  if (s.a2a != "none") {
    out.push_back({"a2a=" + s.a2a + ": DeepEPMoE, stored as FusedMoE, expert parallelism over "
                   "all tp ranks (ep = tp)",
                   kSglang + "layers/moe/ep_moe/layer.py, arg_groups/overrides.py"});
  }
  if (!s.eplb_map.empty()) {
    out.push_back({"EPLB map " + s.eplb_map + ": physical expert p of layer l holds the logical "
                   "expert row l of its server's physical_to_logical_map names (the NextN "
                   "draft's decoder, built as layer 0, row 0)",
                   kSglang + "eplb/expert_location.py logical_to_all_physical"});
  } else if (s.redundant_experts > 0) {
    out.push_back({"redundant physical expert E + j holds logical expert j",
                   kSglang + "eplb/expert_location.py"});
  }
  if (Has(t, "shared_experts")) {
    out.push_back({"shared_experts=fused: the shared expert follows the rank's routed experts in "
                   "w13_weight and w2_weight (loaded as expert " + N(c.num_experts) + ")",
                   kSglang + "models/deepseek_common/deepseek_weight_loader.py"});
  }
}

// Norms, routers, dense MLPs and separate shared experts.
void OtherRules(const ModelConfig& c, const SglangParallel& s, const std::string& t,
                std::vector<LayoutRule>& out) {
  if (Has(t, "norm") || Has(t, "mlp.gate.")) {
    out.push_back({"whole on every rank (RMSNorm, replicated router)", ModelFile(c)});
  } else if (Has(t, "shared_experts")) {
    out.push_back({s.a2a != "none"
                       ? "shared_experts=separate under a2a=" + s.a2a +
                             ": gate_up_proj = [gate; up] and down_proj whole on every rank"
                       : "shared_experts=separate: gate_up_proj and down_proj over all tp=" +
                             N(s.tp) + " ranks",
                   kSglang + "models/deepseek_v2.py"});
  } else if (Has(t, "mlp.")) {
    const bool whole = s.dense_tp == 1;
    out.push_back({whole ? "dense_tp=1: gate_up_proj = [gate; up] and down_proj whole on every rank"
                         : "gate_up_proj = [gate shard; up shard], down_proj row-parallel, over "
                           "all tp=" + N(s.tp) + " ranks",
                   kSglang + (whole ? "models/deepseek_v2.py" : "layers/linear.py")});
  }
}

// A tensor of the MTP layer, model.layers.<num_layers>.*: the NextN draft's, on the last PP
// rank; with pp > 1 the draft's own copy of embed_tokens there too.
void NextnRules(const ModelConfig& c, const SglangParallel& s, const std::string& t,
                std::vector<LayoutRule>& out) {
  const std::string where = s.pp > 1 ? " on the last PP rank only (managers/scheduler.py: "
                                       "non-last stages have no draft worker)"
                                     : "";
  if (s.pp > 1 && Has(t, "embed_tokens") && !Has(t, ".layers.")) {
    out.push_back({"mtp=1 with pp > 1: the NextN draft's own embed_tokens" + where +
                       ", split as the target's, loaded from this tensor (SGLang's loader never "
                       "updates it; ferry writes it every refit)",
                   kSglang + "speculative/pp_draft_embedding.py"});
    return;
  }
  const std::string mtp = "model.layers." + N(c.num_layers) + ".";
  if (t.rfind(mtp, 0) != 0) return;
  const bool own = Has(t, "enorm") || Has(t, "hnorm") || Has(t, "eh_proj") ||
                   Has(t, "shared_head.norm");
  out.push_back({own ? "mtp=1: the NextN draft's model." + t.substr(mtp.size()) +
                           (Has(t, "eh_proj") ? ", an nn.Linear whole on every rank" : "") + where
                     : "mtp=1: the NextN draft's model.decoder, a DeepseekV2DecoderLayer sharded "
                       "as the target's MoE layers" + where,
                 kSglang + "models/deepseek_nextn.py, models/deepseek_common/"
                           "deepseek_weight_loader.py"});
}

// Which PP ranks hold tensor `t` (tools/models/sglang_pipeline.h).
void PipelineRules(const ModelConfig& c, const SglangParallel& s, const std::string& t,
                   std::vector<LayoutRule>& out) {
  Result<std::vector<int64_t>> layers = SglangPipelineLayers(c.num_layers, s.pp, s.partition);
  if (s.pp == 1 || !layers.ok()) return;
  std::string where;
  if (Has(t, ".layers.")) {
    const int64_t l = std::atoll(t.c_str() + t.find(".layers.") + 8);
    int64_t end = 0;
    for (size_t stage = 0; stage < layers->size(); ++stage) {
      end += (*layers)[stage];
      if (l < end) {
        where = "decoder layer " + N(l) + " on PP rank " + N(static_cast<int64_t>(stage)) +
                " (" + (s.partition.empty() ? "get_pp_indices: the last layers % pp ranks take "
                                              "one more"
                                            : "SGLANG_PP_LAYER_PARTITION") + ")";
        break;
      }
    }
  } else if (Has(t, "embed")) {
    where = "the target's embed_tokens on PP rank 0 only";
  } else if (Has(t, "lm_head")) {
    where = SglangModulesOnStage(c, 0, s.pp).lm_head ? "lm_head on every PP rank"
                                                      : "lm_head on the last PP rank only";
  } else if (Has(t, "norm")) {
    where = "the final norm on the last PP rank only";
  }
  if (!where.empty()) {
    out.push_back({"pp=" + N(s.pp) + ": " + where + ", each PP rank on the next tp ranks",
                   kSglang + "distributed/utils.py, " + ModelPath(c)});
  }
}

}  // namespace

std::vector<LayoutRule> SglangRulesForTensor(const ModelConfig& c, const SglangParallel& s,
                                             const std::string& t) {
  std::vector<LayoutRule> out;
  const bool layer = Has(t, ".layers.");
  const bool fused_shared = Has(t, "shared_experts") && s.shared_fused == 1;
  if (!layer && (Has(t, "embed") || Has(t, "lm_head"))) VocabRules(c, s, t, out);
  if (Has(t, ".mlp.experts.") || fused_shared) {
    ExpertRules(c, s, t, out);
  } else if (Has(t, "self_attn.") && !Has(t, "layernorm") && !Has(t, "_norm")) {
    AttentionRules(c, s, out);
  } else if (layer || Has(t, "norm")) {
    OtherRules(c, s, t, out);
  }
  if (s.mtp > 0) NextnRules(c, s, t, out);
  if (s.fp8_block_weights && IsFp8BlockQuantized(t)) {
    out.push_back({"quant=fp8_block: fp8 e4m3, one byte an element, beside a float32 "
                   "weight_scale_inv of one scale a 128x128 block of the rank's partition, as "
                   "loaded (Fp8LinearMethod, Fp8MoEMethod; on Hopper process_weights_after_loading "
                   "keeps them)",
                   kSglang + "layers/quantization/fp8.py"});
  }
  PipelineRules(c, s, t, out);
  out.push_back({"dp replicas copy the server's tp * pp ranks on the next ranks, engines the "
                 "whole",
                 kSglang + "managers/data_parallel_controller.py"});
  return out;
}

}  // namespace ferry::models
