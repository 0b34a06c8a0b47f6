// SGLang's parallelism resolved against a model (tools/models/sglang_spec.h). Paths are SGLang
// 0.5.23's, under python/sglang/srt.
#include "tools/models/sglang_spec.h"

#include <string>

#include "core/base/checked_math.h"
#include "tools/models/sglang_pipeline.h"
#include "tools/models/spec_checks.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

// arg_groups/parallel_hook.py _handle_deprecated_dp_attention: "--dp-size N
// --enable-dp-attention" becomes "--attn-dp-size N" with dp_size 1.
Status ResolveDeprecatedDpAttention(SglangParallel& s) {
  if (!s.dp_attention) return Status::Ok();
  if (s.attn_dp != 1) {
    return InvalidArgument(
        "dp_attention=yes is the old spelling of attn_dp=<dp>; give one of "
        "them, not both");
  }
  s.attn_dp = s.dp;
  s.dp = 1;
  s.dp_attention = false;
  return Status::Ok();
}

// The NextN draft: models/deepseek_common/deepseek_weight_loader.py _initialize_nextn_conf
// ("Only 1 nextn layer is supported", the layer model.layers.<num_hidden_layers>, or 0 for a
// one-layer model, which ferry does not model). Redundant experts would give it layer 0's expert
// locations (DeepseekV2DecoderLayer(config, 0, is_nextn=True)), which is not modelled.
Status CheckNextnDraft(const SglangParallel& s, const ModelConfig& c) {
  if (s.mtp == 0) return Status::Ok();
  if (c.family != ModelFamily::kDeepseekV3 || c.nextn_layers != 1 || c.num_layers < 2) {
    return InvalidArgument("mtp=" + Num(s.mtp) + ": ferry models SGLang's NextN draft of "
                           "DeepSeek-V3 (DeepseekV3ForCausalLMNextN: one MTP layer, "
                           "num_nextn_predict_layers 1, after at least 2 layers); '" + c.name +
                           "' has " + Num(c.nextn_layers) + " MTP layer(s)");
  }
  if (s.mtp != 1) {
    return InvalidArgument("mtp=" + Num(s.mtp) + ": SGLang's NextN draft holds one MTP layer");
  }
  if (s.redundant_experts > 0) {
    return InvalidArgument("mtp=1 with redundant experts: the draft's expert placement is not "
                           "modelled");
  }
  return Status::Ok();
}

// What ferry does not model of SGLang, refused rather than guessed.
Status CheckModelled(const SglangParallel& s, const ModelConfig& c) {
  if (c.family == ModelFamily::kNemotronH) {
    return InvalidArgument("SGLang layouts of hybrid Mamba models (Nemotron-H) are not modelled");
  }
  // models/qwen3_moe.py Qwen3MoeForCausalLM builds its own lm_head whatever the config says
  if (c.family == ModelFamily::kQwen3Moe && c.tie_embeddings) {
    return InvalidArgument("tied embeddings: SGLang's Qwen3MoeForCausalLM never ties lm_head");
  }
  // models/deepseek_v2.py builds a last-rank lm_head of its own with pp > 1, which
  // deepseek_common/deepseek_weight_loader.py never fills from embed_tokens
  if (c.family == ModelFamily::kDeepseekV3 && c.tie_embeddings && s.pp > 1) {
    return InvalidArgument("tied embeddings with pp=" + Num(s.pp) + ": SGLang's DeepSeek "
                           "loader leaves the last PP rank's lm_head unloaded");
  }
  FERRY_RETURN_IF_ERROR(CheckNextnDraft(s, c));
  if (s.redundant_experts > 0 && s.ep == 1) {
    return InvalidArgument("redundant=" + Num(s.redundant_experts) + " without expert "
                           "parallelism: ferry models redundant experts with ep > 1 only");
  }
  // each DP replica is a scheduler of its own (managers/data_parallel_controller.py), with its
  // own ExpertLocationMetadata, which the file's one map a server does not tell apart
  if (!s.eplb_map.empty() && s.dp > 1) {
    return InvalidArgument("eplb_map= with dp=" + Num(s.dp) + ": the map file holds one map a "
                           "server; run each replica as a server of its own (engines=N)");
  }
  return Status::Ok();
}

// arg_groups/overrides.py _a2a_ep_size: the all-to-all backends' expert parallelism spans the TP
// group, whatever --ep-size said.
Status ResolveA2a(SglangParallel& s, const ModelConfig& c) {
  if (s.a2a == "none") return Status::Ok();
  if (!IsModelledSglangA2a(s.a2a)) {
    return InvalidArgument("a2a=" + s.a2a + ": ferry models SGLang's --moe-a2a-backend none, "
                           "deepep and mooncake");
  }
  if (!c.IsMoe()) {
    return InvalidArgument("a2a=" + s.a2a + ": an all-to-all backend moves experts' tokens, and '" +
                           c.name + "' has no experts");
  }
  s.ep = s.tp;
  return Status::Ok();
}

// SGLang's checks of the server arguments.
Status CheckSizes(const SglangParallel& s, const ModelConfig& c) {
  // runtime_context.py derive_attn_tp_size: tp // attn_dp
  FERRY_RETURN_IF_ERROR(CheckDivides("tp", s.tp, "attn_dp", s.attn_dp));
  // arg_groups/overrides.py _dp_lm_head_validation
  if (s.dp_lm_head && s.attn_dp == 1) {
    return InvalidArgument(
        "dp_lm_head=yes: --enable-dp-lm-head requires attention DP "
        "(--attn-dp-size), give attn_dp > 1");
  }
  // arg_groups/validation_hook.py: "moe_dense_tp_size only supports None, 1, or tp_size"
  if (s.dense_tp != 0 && s.dense_tp != 1) {
    return InvalidArgument("dense_tp=" + Num(s.dense_tp) + ": SGLang's --moe-dense-tp-size "
                           "only supports None, 1, or tp_size");
  }
  if (s.dense_tp == 1 && c.family != ModelFamily::kDeepseekV3) {
    return InvalidArgument(
        "dense_tp=1: SGLang's --moe-dense-tp-size applies to DeepSeek's dense "
        "layers, which '" +
        c.name + "' does not have");
  }
  if (!c.IsMoe() && (s.ep != 1 || s.redundant_experts != 0 || !s.eplb_map.empty())) {
    return InvalidArgument("the model has no experts; ep must be 1 and redundant and eplb_map "
                           "unset");
  }
  return CheckDivides("tp", s.tp, "ep", s.ep);
}

// models/deepseek_v2.py shared_experts_fusion_disable_reason, on NVIDIA GPUs of compute
// capability 8.0 and later with the default MoE backends: fusion for DeepseekV3ForCausalLM's 256
// routed experts with one shared expert, not under expert parallelism.
Status ResolveSharedFusion(SglangParallel& s, const ModelConfig& c) {
  if (c.num_shared_experts == 0) {
    if (s.shared_fused == 1) {
      return InvalidArgument("shared_experts=fused: '" + c.name + "' has no shared expert");
    }
    s.shared_fused = -1;  // nothing to fuse: no key printed
    return Status::Ok();
  }
  const bool can = c.family == ModelFamily::kDeepseekV3 && c.num_experts == 256 &&
                   c.num_shared_experts == 1 && s.ep == 1;
  if (s.shared_fused == 1 && !can) {
    return InvalidArgument(
        s.ep > 1 ? "shared_experts=fused: SGLang fuses shared experts under expert parallelism "
                   "only on AMD GPUs or with --enforce-shared-experts-fusion, whose per-rank "
                   "placement ferry does not model"
                 : "shared_experts=fused: Config does not support fused shared expert(s) "
                   "(SGLang fuses DeepSeek V3/R1's: 256 routed experts, 1 shared)");
  }
  // "DeepEP: fusion off by default" for the DeepEP-class backends, deepep and mooncake
  if (s.shared_fused == -1) s.shared_fused = can && s.a2a == "none" ? 1 : 0;
  return Status::Ok();
}

// layers/moe/fused_moe_triton/layer.py FusedMoE: the routed experts (with redundant ones) split
// evenly over ep, the FFN over moe_tp.
Status CheckMoe(const SglangParallel& s, const ModelConfig& c) {
  const int64_t moe_tp = s.tp / s.ep;
  FERRY_RETURN_IF_ERROR(CheckDivides("moe_intermediate", c.moe_intermediate, "tp/ep", moe_tp));
  return CheckDivides("routed experts (with redundant ones)", c.num_experts + s.redundant_experts,
                      "ep", s.ep);
}

// Attention over its group; dense MLPs and separate shared experts over all tp ranks.
Status CheckShards(const SglangParallel& s, const ModelConfig& c) {
  const int attn = SglangAttentionDpSplitOf(c).attention ? SglangAttentionTp(s) : s.tp;
  FERRY_RETURN_IF_ERROR(CheckDivides("num_heads", c.num_heads, "the attention group", attn));
  // models/qwen3_moe.py Qwen3MoeAttention: KV heads divide or are divided by the group
  if (!c.IsMla() && c.num_kv_heads % attn != 0 && attn % c.num_kv_heads != 0) {
    return InvalidArgument("num_kv_heads " + Num(c.num_kv_heads) + " and the attention group's " +
                           Num(attn) + " ranks do not divide one another");
  }
  if (s.dense_tp != 1 && HasDenseMlp(c)) {
    FERRY_RETURN_IF_ERROR(CheckDivides("intermediate", c.intermediate, "tp", s.tp));
  }
  if (c.num_shared_experts > 0 && s.shared_fused == 0 && s.a2a == "none") {
    FERRY_RETURN_IF_ERROR(
        CheckDivides("shared expert size", c.num_shared_experts * c.moe_intermediate, "tp", s.tp));
  }
  return Status::Ok();
}

}  // namespace

int64_t SglangRanks(const SglangParallel& s) {
  return SatMul(SatMul(SatMul(s.tp, s.pp), s.dp_attention ? 1 : s.dp), s.engines);
}

bool IsModelledSglangA2a(const std::string& backend) {
  return backend == "none" || backend == "deepep" || backend == "mooncake";
}

int SglangAttentionTp(const SglangParallel& s) { return s.tp / s.attn_dp; }

SglangAttentionDpSplit SglangAttentionDpSplitOf(const ModelConfig& c) {
  // models/deepseek_v2.py (get_embedding_tp_kwargs, parallel_group="attn_tp") and qwen3_moe.py
  // (its model is qwen2_moe.py's, embed_tokens with use_attn_tp_group=is_dp_attention_enabled())
  if (c.IsMoe()) return {true, true, true};
  // models/qwen3.py: Qwen3Attention's parallel_group="attn_tp", Qwen2Model's embed_tokens, and
  // lm_head with use_attn_tp_group=enable_dp_lm_head
  if (c.qk_norm) return {true, true, true};
  // models/qwen2.py: attention over the TP group, Qwen2Model's embed_tokens over the attention
  // group, lm_head without use_attn_tp_group
  if (c.qkv_bias) return {false, true, false};
  // models/llama.py: attention and embed_tokens over the TP group, lm_head with
  // use_attn_tp_group=enable_dp_lm_head
  return {false, false, true};
}

Status ResolveSglang(SglangParallel& s, const ModelConfig& c) {
  FERRY_RETURN_IF_ERROR(ResolveDeprecatedDpAttention(s));
  FERRY_RETURN_IF_ERROR(CheckWorld("sglang tp*pp*dp*engines", SglangRanks(s)));
  FERRY_RETURN_IF_ERROR(ResolveA2a(s, c));
  FERRY_RETURN_IF_ERROR(CheckModelled(s, c));
  if (s.dense_tp == s.tp) s.dense_tp = 0;  // --moe-dense-tp-size tp_size: the default
  if (s.pp == 1) s.partition.clear();       // get_pp_indices ignores it
  FERRY_RETURN_IF_ERROR(SglangPipelineLayers(c.num_layers, s.pp, s.partition).status());
  FERRY_RETURN_IF_ERROR(CheckSizes(s, c));
  FERRY_RETURN_IF_ERROR(ResolveSharedFusion(s, c));
  if (c.IsMoe()) FERRY_RETURN_IF_ERROR(CheckMoe(s, c));
  return CheckShards(s, c);
}

}  // namespace ferry::models
