// SGLang's parallelism as a framework spec ("sglang:tp=8,attn_dp=8,ep=8"): the server
// arguments that decide where an SGLang server keeps each weight, and their resolution against a
// model (defaults filled in, SGLang's own assertions and what ferry does not model refused with
// the reason). Read from SGLang 0.5.23 (PyPI sglang-0.5.23, python/sglang/srt, the paths below
// relative to it). The layout itself: tools/models/sglang_layout.h.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

struct SglangParallel {
  // --tp-size: the ranks of one PP stage of a server.
  int tp = 1;
  // --pp-size: the server's PP stages, world rank tp * pp_rank + tp_rank (runtime_context.py
  // spawn_world_rank); which layers and model-level modules each builds:
  // tools/models/sglang_pipeline.h.
  int pp = 1;
  // SGLANG_PP_LAYER_PARTITION ("partition=3.2" for "3,2"): decoder layers per PP rank; empty:
  // get_pp_indices' even split. Ignored, and cleared, with pp 1, as SGLang ignores it.
  std::vector<int> partition;
  // --dp-size: copies of the server, each on the next tp * pp ranks
  // (managers/data_parallel_controller.py launch_dp_schedulers, base_gpu_id += tp*pp).
  int dp = 1;
  // --attn-dp-size: attention data parallelism inside the server's tp ranks, which adds no ranks:
  // attention groups of tp/attn_dp consecutive ranks (runtime_context.py derive_attn_tp_size,
  // derive_attention_ranks: attn_tp_rank = tp_rank % attn_tp_size).
  int attn_dp = 1;
  // --enable-dp-attention, the deprecated spelling: --dp-size N with it is --attn-dp-size N
  // (arg_groups/parallel_hook.py _handle_deprecated_dp_attention). Resolved into attn_dp.
  bool dp_attention = false;
  // --ep-size: the MoE layers' expert-parallel size, dividing tp; each expert's FFN split over
  // moe_tp = tp / ep ranks (runtime_context.py: moe_ep_rank = tp_rank // moe_tp, moe_tp_rank =
  // tp_rank % moe_tp). EP rank r holds routed experts [r*P/ep, (r+1)*P/ep) of the P routed ones
  // (layers/moe/fused_moe_triton/layer.py FusedMoE: assert P % ep == 0).
  int ep = 1;
  // --ep-num-redundant-experts: P = E + redundant, physical p holding logical p mod E
  // (eplb/expert_location.py init_trivial).
  int redundant_experts = 0;
  // "eplb_map=PATH": the servers' current physical_to_logical_map after EPLB moved experts
  // (--enable-eplb) or --init-expert-location placed them, one per server
  // (tools/models/eplb_map.h ReadSglangEplbMaps): physical expert p then holds the logical
  // expert row l of its server's map names. Empty: the init_trivial placement above.
  std::string eplb_map;
  // Independent servers, each a whole copy of tp * pp * dp ranks.
  int engines = 1;
  // --moe-dense-tp-size 1 ("dense_tp=1"): DeepSeek's dense MLPs whole on every rank
  // (models/deepseek_v2.py DeepseekV2DecoderLayer, is_dense_ffn_fully_dp); 0: over all tp.
  int dense_tp = 0;
  // --enable-dp-lm-head: lm_head split over the attention group instead of all tp ranks
  // (ParallelLMHead use_attn_tp_group); SGLang requires attention DP for it.
  bool dp_lm_head = false;
  // DeepSeek-V3's shared expert fused into the routed experts' w13_weight / w2_weight after the
  // rank's routed experts ("shared_experts=fused"; models/deepseek_v2.py
  // shared_experts_fusion_disable_reason, deepseek_common/deepseek_weight_loader.py renaming
  // mlp.shared_experts to mlp.experts.<n_routed_experts>) or kept as its own MLP over all tp
  // ranks ("separate", --disable-shared-experts-fusion). -1: SGLang's default, resolved to 1 for
  // DeepSeek-V3's 256 routed experts and 1 shared expert without expert parallelism, else 0.
  int shared_fused = -1;
  // --moe-a2a-backend: "none", or an all-to-all backend ferry models, "deepep" or "mooncake"
  // (layers/moe/ep_moe/layer.py get_moe_impl_class: DeepEPMoE, a FusedMoE storing its experts as
  // FusedMoE does). It makes expert parallelism span the TP group (arg_groups/overrides.py
  // _a2a_ep_size: ep = tp), keeps a separate shared expert whole on every rank
  // (models/deepseek_v2.py: parallel_group "replicated" under these backends) and leaves it
  // unfused by default (shared_experts_fusion_disable_reason: "DeepEP: fusion off by default").
  std::string a2a = "none";
  // The NextN speculative-decoding draft ("mtp=1", --speculative-algorithm NEXTN or EAGLE with
  // the checkpoint's MTP layer): models/deepseek_nextn.py DeepseekV3ForCausalLMNextN, one MTP
  // layer, in the same TP layout as the target's layers (speculative/draft_parallel.py: NextN
  // drafts run in the target's layout) and with the target's MoE backends
  // (layers/moe/utils.py _default_speculative_a2a_backend), on the last PP stage only
  // (managers/scheduler.py: "non-last stages have no draft worker"). 0: no draft.
  int mtp = 0;
  // "quant=fp8_block": the checkpoint is FP8 block-quantized (quantization_config fp8,
  // weight_block_size [128, 128]) and the server keeps it so: every decoder-layer projection
  // fp8 e4m3 beside a float32 weight_scale_inv of one scale a 128x128 block
  // (tools/models/fp8_block_weights.h, layers/quantization/fp8.py Fp8LinearMethod and
  // Fp8MoEMethod). That is what process_weights_after_loading leaves on Hopper, where DeepGEMM
  // and Triton both read the scales as loaded (layers/deep_gemm_wrapper/configurer.py:
  // DEEPGEMM_SCALE_UE8M0 only on SM100 and SM120, where SGLang requantizes them to UE8M0 and
  // marks them format_ue8m0, which ferry.sglang refuses).
  bool fp8_block_weights = false;
};

// Fills SGLang's defaults into `s` (dp_attention resolved into attn_dp) and checks it against
// `c`: SGLang's assertions (attn_dp and ep divide tp, routed experts divisible by ep, dense_tp 1 or
// tp, dp_lm_head with attention DP, the layers' split over PP ranks) and what ferry does not
// model (Nemotron-H, shared-expert fusion where SGLang disables it, a tied DeepSeek model with
// pp > 1, all-to-all backends other than deepep and mooncake, a NextN draft other than
// DeepSeek-V3's or with redundant experts), each refused naming why.
Status ResolveSglang(SglangParallel& s, const ModelConfig& c);

// The ranks of all servers: tp * pp * dp * engines (of a resolved spec).
int64_t SglangRanks(const SglangParallel& s);

// Whether ferry models SGLang's --moe-a2a-backend `backend`: "none", "deepep" or "mooncake".
bool IsModelledSglangA2a(const std::string& backend);

// The attention group's size, tp / attn_dp (of a resolved spec).
int SglangAttentionTp(const SglangParallel& s);

// What a model class splits over the attention group under attention DP rather than over all tp
// ranks (the MLPs always go over all tp ranks, or whole with dense_tp=1).
struct SglangAttentionDpSplit {
  bool attention = false;     // the attention projections (parallel_group="attn_tp")
  bool embed_tokens = false;  // VocabParallelEmbedding(use_attn_tp_group=...)
  bool lm_head = false;       // ParallelLMHead(use_attn_tp_group=enable_dp_lm_head)
};
SglangAttentionDpSplit SglangAttentionDpSplitOf(const ModelConfig& c);

}  // namespace ferry::models
