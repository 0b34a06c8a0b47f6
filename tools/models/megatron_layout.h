// Megatron-LM (the trainer side): where Megatron-Core keeps each weight of a ModelPreset, as
// fragments in buffers that carry Megatron's own parameter names.
//
// Ranks = tp*cp*dp*pp, ordered tp fastest, then cp, dp, pp (Megatron's "tp-cp-ep-dp-pp"); experts
// use etp fastest, then ep, expert-dp, pp. Fusions: linear_qkv interleaved per query group,
// linear_fc1 = [gate; up] per TP shard, a rank's local experts kept as the chosen expert module
// keeps them (tools/models/megatron_expert_storage.h; ETP splits the expert FFN), vocab-parallel embedding/output
// (padded as tools/models/vocab_padding.h says), layers split over pipeline stages and their
// interleaved model chunks (tools/models/pipeline_stages.h; local layer numbers per chunk, chunk v
// named "model<v>." when a rank holds several), DP and CP ranks hold replicas. mtp=N: the MTP
// block "mtp.layers.<i>.{enorm, hnorm, eh_proj, mtp_model_layer.*, final_layernorm}" on the last
// virtual stage of the last pipeline rank (or where a layout string's 'm's are), eh_proj
// column-parallel, with the embedding copy that stage keeps (megatron/core/transformer/
// multi_token_prediction.py, megatron/core/models/gpt/gpt_model.py).
//
// Pure functions; thread-safe.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/models/framework_spec.h"
#include "tools/models/presets.h"

namespace ferry::models {

// Appends the Megatron layout of `preset` under `resolved` (ResolveFrameworkSpec's etp and dp
// filled in) on ranks first_rank .. first_rank + NumRanks - 1 to `out`. With resolved.mtp > 0
// `preset` must hold that many MTP layers (WithMtpLayers). `stack_expert_tensors`:
// FrameworkSpec::stack_expert_tensors.
Status BuildMegatronLayout(const ModelPreset& preset, const MegatronParallel& resolved,
                           bool stack_expert_tensors, int first_rank, Layout& out);

}  // namespace ferry::models
