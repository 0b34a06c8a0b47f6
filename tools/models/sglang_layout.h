// SGLang (an inference engine): where an SGLang server keeps each weight of a ModelPreset, as
// fragments in buffers that carry SGLang's own parameter names. Read from SGLang 0.5.23
// (python/sglang/srt; files cited where each rule is placed, sglang_layout.cc).
//
// One server is pp stages of tp ranks, rank first_rank + pp_rank * tp + tp_rank; each stage holds
// its decoder layers, the first embed_tokens, the last the final norm, and lm_head where the
// model class builds it (tools/models/sglang_pipeline.h). Within a stage, attention (qkv_proj =
// [q; k; v] per rank, KV heads replicated when the group exceeds them; DeepSeek's MLA with
// fused_qkv_a_proj_with_mqa = [q_a_proj; kv_a_proj_with_mqa] replicated) is split over the
// attention group: all tp ranks, or with attention DP each run of tp/attn_dp consecutive ranks,
// replicated across the runs; so is embed_tokens (which of the three each model class splits so:
// SglangAttentionDpSplitOf). Routed experts (w13_weight [local, 2*I/moe_tp, hidden] of [gate; up], w2_weight
// [local, hidden, I/moe_tp]) sit on EP rank tp_rank / moe_tp, FFN shard tp_rank % moe_tp,
// moe_tp = tp/ep, physical expert p holding logical p mod E, or with eplb_map= the logical expert
// its server's map names (tools/models/eplb_map.h: each server then built with its own);
// DeepSeek-V3's fused shared expert follows a rank's routed experts. Dense MLPs,
// separate shared experts and lm_head are split over all tp ranks (dense_tp=1: dense MLPs whole
// on each; dp_lm_head: lm_head over the attention group). The vocabulary is padded to a multiple
// of 64 (of 64 * ranks where 64 does not divide) and split over the ranks that share it. dp
// copies of the server follow on the next ranks, then the other engines.
//
// With quant=fp8_block the decoder layers' projections are fp8 e4m3, each with its float32
// weight_scale_inv (w13_weight_scale_inv, w2_weight_scale_inv for experts) beside it
// (tools/models/fp8_block_weights.h).
//
// SGLang derives DeepSeek's absorbed-MLA tensors w_kc / w_vc from kv_b_proj in post_load_weights
// (models/deepseek_v2.py): they are copies, not in this layout, so a server refitted in place
// must run post_load_weights before decoding.
//
// Pure functions; thread-safe.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/models/presets.h"
#include "tools/models/sglang_spec.h"

namespace ferry::models {

// Appends the SGLang layout of `preset` under `resolved` (ResolveSglang) on ranks first_rank ..
// first_rank + SglangRanks(resolved) - 1 to `out`. `stack_expert_tensors`:
// FrameworkSpec::stack_expert_tensors.
Status BuildSglangLayout(const ModelPreset& preset, const SglangParallel& resolved,
                         bool stack_expert_tensors, int first_rank, Layout& out);

}  // namespace ferry::models
