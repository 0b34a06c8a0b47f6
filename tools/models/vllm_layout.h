// vLLM (the inference side): where a vLLM engine keeps each weight of a ModelPreset, as fragments
// in buffers that carry vLLM's own parameter names.
//
// Ranks = tp*pp*dp per engine, rank = (dp_rank*pp + pp_rank)*tp + tp_rank (vLLM's DP x PP x TP
// order). PP rank s holds the decoder layers vLLM's get_pp_indices gives it (or the explicit
// partition's) and the embedding, final norm and lm_head as the model's vLLM class builds them
// (tools/models/vllm_pipeline.h). qkv_proj = [q; k; v] per TP shard (KV heads replicated when
// tp > kv heads), gate_up_proj, MoE w13_weight (stacked [gate; up] per local expert) and
// w2_weight. MoE layers span all tp*dp ranks of their PP stage as in vLLM: with ep=1 every
// expert's FFN is split over them, with ep=tp*dp (--enable-expert-parallel) each holds whole
// experts, the first E mod ep one more. Attention and dense weights are replicated over DP. Vocab
// padded to a multiple of 64 and split over tp (tools/models/vocab_padding.h). Mamba's A is
// marked as stored transformed (fp32 -exp(A_log)). engines=N repeats the whole engine N times on
// the next ranks (independent instances, each with every expert). mtp=N: the speculative-decoding drafter's MTP
// layers "model.layers.<L>.{enorm, hnorm, eh_proj, shared_head.norm, mtp_block.*}" (L from
// num_layers) on the ranks of the last PP rank (every DP replica), eh_proj replicated, mtp_block
// sharded as a decoder layer, its experts over that stage's tp*dp ranks; the drafter shares the
// target's lm_head, and its embed_tokens too without PP; with pp > 1 it holds its own copy of the
// embedding, "model.embed_tokens.weight" split over TP on those ranks
// (vllm/model_executor/models/deepseek_mtp.py, vllm/v1/spec_decode/llm_base_proposer.py,
// vllm/v1/worker/gpu_model_runner.py).
//
// Pure functions; thread-safe.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/models/framework_spec.h"
#include "tools/models/presets.h"

namespace ferry::models {

// Appends the vLLM layout of `preset` under `resolved` on ranks first_rank ..
// first_rank + tp*pp*dp*engines - 1 to `out`. With resolved.mtp > 0 `preset` must hold that many
// MTP layers (WithMtpLayers). `stack_expert_tensors`:
// FrameworkSpec::stack_expert_tensors.
Status BuildVllmLayout(const ModelPreset& preset, const VllmParallel& resolved,
                       bool stack_expert_tensors, int first_rank, Layout& out);

}  // namespace ferry::models
