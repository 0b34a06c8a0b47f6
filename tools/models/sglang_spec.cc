// SGLang's parallelism resolved against a model (tools/models/sglang_spec.h).
#include "tools/models/sglang_spec.h"

#include <string>

#include "core/base/checked_math.h"
#include "tools/models/spec_checks.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

// What ferry does not model of SGLang, refused rather than guessed.
Status CheckModelled(const SglangParallel& s, const ModelConfig& c) {
  if (s.pp != 1) {
    return InvalidArgument("pp=" + Num(s.pp) + ": SGLang's pipeline parallelism is not modelled "
                           "(its model classes differ in which PP ranks build lm_head)");
  }
  if (c.family == ModelFamily::kNemotronH) {
    return InvalidArgument("SGLang layouts of hybrid Mamba models (Nemotron-H) are not modelled");
  }
  // srt/models/deepseek_v2.py and qwen3_moe.py shard attention over the attention group and
  // replicate embed_tokens under DP attention; the dense model classes are not modelled so
  if (s.dp_attention && !c.IsMoe()) {
    return InvalidArgument("dp_attention=yes: ferry models SGLang's DP attention for its MoE "
                           "models (DeepSeek-V3, Qwen3-MoE), not for '" + c.name + "'");
  }
  // srt/models/qwen3_moe.py and deepseek_v2.py build their own lm_head and never tie it
  if (c.IsMoe() && c.tie_embeddings) {
    return InvalidArgument("tied embeddings: SGLang's MoE model classes build their own lm_head");
  }
  if (s.redundant_experts > 0 && s.ep == 1) {
    return InvalidArgument("redundant=" + Num(s.redundant_experts) + " without expert "
                           "parallelism: ferry models redundant experts with ep > 1 only");
  }
  return Status::Ok();
}

// SGLang's server-argument checks on the parallel sizes (srt/server_args.py).
Status CheckSizes(const SglangParallel& s, const ModelConfig& c) {
  if (s.dp_attention && s.tp % s.dp != 0) {
    return InvalidArgument("dp_attention=yes needs dp to divide tp (attention groups of tp/dp "
                           "ranks), got tp=" + Num(s.tp) + ", dp=" + Num(s.dp));
  }
  if (s.dp_lm_head && !s.dp_attention) {
    return InvalidArgument("dp_lm_head=yes (--enable-dp-lm-head) requires dp_attention=yes");
  }
  if (s.dense_tp != 0 && s.dense_tp != 1) {
    return InvalidArgument("dense_tp=" + Num(s.dense_tp) + ": SGLang's --moe-dense-tp-size "
                           "takes 1 (dense MLPs whole on every rank) or nothing (over all tp)");
  }
  if (s.dense_tp == 1 && c.family != ModelFamily::kDeepseekV3) {
    return InvalidArgument("dense_tp=1: SGLang's --moe-dense-tp-size applies to DeepSeek's dense "
                           "layers, which '" + c.name + "' does not have");
  }
  if (!c.IsMoe() && (s.ep != 1 || s.redundant_experts != 0 || s.shared_fused == 1)) {
    return InvalidArgument("the model has no experts; ep must be 1 and redundant and "
                           "shared_experts unset");
  }
  return CheckDivides("tp", s.tp, "ep", s.ep);
}

// srt/models/deepseek_v2.py determine_num_fused_shared_experts: fusion only for DeepSeek-V3's 256
// routed experts with one shared expert, and not under expert parallelism.
Status ResolveSharedFusion(SglangParallel& s, const ModelConfig& c) {
  const bool can = c.family == ModelFamily::kDeepseekV3 && c.num_experts == 256 &&
                   c.num_shared_experts == 1 && s.ep == 1;
  if (s.shared_fused == 1 && !can) {
    return InvalidArgument(
        s.ep > 1 ? "shared_experts=fused: SGLang disables shared experts fusion under expert "
                   "parallelism"
                 : "shared_experts=fused: SGLang fuses only DeepSeek V3/R1's shared expert "
                   "(n_routed_experts 256, n_shared_experts 1)");
  }
  if (s.shared_fused == -1) s.shared_fused = can ? 1 : 0;
  if (c.num_shared_experts == 0) s.shared_fused = -1;  // nothing to fuse: no key printed
  return Status::Ok();
}

Status CheckMoe(const SglangParallel& s, const ModelConfig& c) {
  const int64_t moe_tp = s.tp / s.ep;
  FERRY_RETURN_IF_ERROR(CheckDivides("moe_intermediate", c.moe_intermediate, "tp/ep", moe_tp));
  const int64_t physical = c.num_experts + (s.shared_fused == 1 ? c.num_shared_experts : 0) +
                           s.redundant_experts;
  return CheckDivides("physical experts (routed + fused shared + redundant)", physical, "ep", s.ep);
}

// Attention over its group, dense MLPs and separate shared experts over all tp ranks.
Status CheckShards(const SglangParallel& s, const ModelConfig& c) {
  const int attn = SglangAttentionTp(s);
  FERRY_RETURN_IF_ERROR(CheckDivides("num_heads", c.num_heads, "the attention group", attn));
  if (!c.IsMla() && c.num_kv_heads % attn != 0 && attn % c.num_kv_heads != 0) {
    return InvalidArgument("num_kv_heads " + Num(c.num_kv_heads) + " and the attention group's " +
                           Num(attn) + " ranks do not divide one another");
  }
  if (s.dense_tp != 1 && HasDenseMlp(c)) {
    FERRY_RETURN_IF_ERROR(CheckDivides("intermediate", c.intermediate, "tp", s.tp));
  }
  if (c.num_shared_experts > 0 && s.shared_fused == 0) {
    FERRY_RETURN_IF_ERROR(CheckDivides("shared expert size",
                                       c.num_shared_experts * c.moe_intermediate, "tp", s.tp));
  }
  // srt/layers/vocab_parallel_embedding.py: the vocabulary padded to 64 rows, then divided
  if (!s.dp_attention) FERRY_RETURN_IF_ERROR(VllmPaddedVocab(c.vocab, s.tp).status());
  return VllmPaddedVocab(c.vocab, s.dp_lm_head ? attn : s.tp).status();
}

}  // namespace

int64_t SglangRanks(const SglangParallel& s) {
  return SatMul(SatMul(s.tp, s.dp_attention ? 1 : s.dp), s.engines);
}

int SglangAttentionTp(const SglangParallel& s) { return s.dp_attention ? s.tp / s.dp : s.tp; }

Status ResolveSglang(SglangParallel& s, const ModelConfig& c) {
  FERRY_RETURN_IF_ERROR(CheckWorld("sglang tp*dp*engines", SglangRanks(s)));
  FERRY_RETURN_IF_ERROR(CheckModelled(s, c));
  FERRY_RETURN_IF_ERROR(CheckSizes(s, c));
  FERRY_RETURN_IF_ERROR(ResolveSharedFusion(s, c));
  if (c.IsMoe()) FERRY_RETURN_IF_ERROR(CheckMoe(s, c));
  return CheckShards(s, c);
}

}  // namespace ferry::models
