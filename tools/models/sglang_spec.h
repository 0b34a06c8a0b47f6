// SGLang's parallelism as a framework spec ("sglang:tp=8,dp=8,dp_attention=yes,ep=8"): the
// server arguments that decide where an SGLang engine keeps each weight, and their resolution
// against a model (defaults filled in, SGLang's own assertions and what ferry does not model
// refused with the reason). The layout itself: tools/models/sglang_layout.h.
//
// Pure functions; thread-safe.
#pragma once

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

struct SglangParallel {
  // --tp-size: the ranks of one engine (one torch world, world rank = tp_rank: sglang
  // srt/model_executor/model_runner.py init_torch_distributed, with pp 1).
  int tp = 1;
  // --pp-size: only 1 is modelled; SGLang's model classes differ in where they keep lm_head
  // under pipeline parallelism.
  int pp = 1;
  // --dp-size. Without DP attention: dp independent copies of the engine on the next tp ranks
  // each (srt/managers/data_parallel_controller.py launch_dp_schedulers, base_gpu_id += tp*pp).
  // With it (--enable-dp-attention): no more ranks; the engine's tp ranks form dp attention groups
  // of tp/dp consecutive ranks (srt/layers/dp_attention.py compute_dp_attention_world_info:
  // attn_tp_size = tp // dp, attn_dp_rank = tp_rank // attn_tp_size).
  int dp = 1;
  bool dp_attention = false;
  // --ep-size: the MoE layers' expert-parallel size, dividing tp; each expert's FFN split over
  // moe_tp = tp / ep ranks (srt/distributed/parallel_state.py: moe_ep_rank = tp_rank // moe_tp,
  // moe_tp_rank = tp_rank % moe_tp). EP rank r holds physical experts [r*P/ep, (r+1)*P/ep)
  // (srt/layers/moe/fused_moe_triton/layer.py FusedMoE: assert num_experts % moe_ep_size == 0).
  int ep = 1;
  // --ep-num-redundant-experts: P = E + redundant physical experts, redundant slot E + j holding
  // logical expert j (srt/eplb/expert_location.py init_trivial).
  int redundant_experts = 0;
  // Independent servers, each a whole copy of tp * (dp_attention ? 1 : dp) ranks.
  int engines = 1;
  // --moe-dense-tp-size 1 ("dense_tp=1"): DeepSeek's dense MLP layers whole on every rank
  // (srt/models/deepseek_v2.py DeepseekV2DecoderLayer, enable_moe_dense_fully_dp); 0: over all tp.
  int dense_tp = 0;
  // --enable-dp-lm-head: lm_head split over the attention group instead of all tp ranks
  // (ParallelLMHead use_attn_tp_group); SGLang requires DP attention for it.
  bool dp_lm_head = false;
  // DeepSeek-V3's shared expert fused into the routed experts as expert E of w13_weight / w2_weight
  // ("shared_experts=fused"; srt/models/deepseek_v2.py determine_num_fused_shared_experts,
  // load_weights renaming mlp.shared_experts to mlp.experts.<n_routed_experts>) or kept as its own
  // MLP over all tp ranks ("separate", --disable-shared-experts-fusion). -1: SGLang's default,
  // resolved to 1 (fused) for DeepSeek-V3's 256 routed experts and 1 shared expert without expert
  // parallelism, 0 otherwise.
  int shared_fused = -1;
};

// Fills SGLang's defaults into `s` and checks it against `c`: SGLang's assertions (dp divides tp
// under DP attention, ep divides tp, physical experts divisible by ep, the vocabulary's padded
// rows by the ranks that split them) and what ferry does not model (pp > 1, Nemotron-H, DP attention
// of a dense model, shared-expert fusion where SGLang disables it), each refused naming why.
Status ResolveSglang(SglangParallel& s, const ModelConfig& c);

// The ranks of all engines: tp * (dp_attention ? 1 : dp) * engines.
int64_t SglangRanks(const SglangParallel& s);

// The attention group's size: tp / dp under DP attention, tp otherwise.
int SglangAttentionTp(const SglangParallel& s);

}  // namespace ferry::models
