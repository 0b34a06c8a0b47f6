// Framework specs: the text a user writes to name a framework's parallelism
// ("megatron:tp=2,pp=4,ep=16", "vllm:tp=8,dp=2,ep=16,engines=4"), parsed into a FrameworkSpec,
// resolved against a model (defaults filled, divisibility checked) and counted in ranks.
//
//  megatron:tp=,pp=,first=,last=,vstages=,vstage_layers=,ep=,etp=,dp=,cp=,experts=,
//           vocab_divisible_by=,pad_vocab=,buffers=params|distopt,overlap_grad_reduce=,pattern=,
//           mtp=,mtp_repeated=,mcore=,layout=
//      ranks = tp*cp*dp*pp (tools/models/megatron_layout.h). first/last: layers of the first/last
//      pipeline stage; vstages/vstage_layers: interleaved model chunks; layout: Megatron's
//      --pipeline-model-parallel-layout string, the last key (it may hold commas)
//      (tools/models/pipeline_stages.h). pattern: a hybrid model's --hybrid-layer-pattern with
//      '|' stage boundaries (tools/models/hybrid_pipeline_stages.h). buffers=distopt: parameters in the distributed
//      optimizer's contiguous buffers (tools/models/megatron_param_buffers.h). experts: Megatron-Core's expert module
//      (tools/models/megatron_expert_storage.h). etp defaults to tp (as in Megatron); dp defaults
//      to the smallest value that fits ep*etp. vocab_divisible_by (default 128) is Megatron-LM's --make-vocab-size-divisible-by; pad_vocab=no is Megatron-Bridge's
//      should_pad_vocab=False (how NeMo RL builds a model from a Hugging Face checkpoint). mtp:
//      --mtp-num-layers, the model's multi-token prediction layers (tools/models/megatron_layout.h);
//      mtp_repeated=1: --mtp-use-repeated-layer, one MTP layer applied mtp times.
//      mcore: the Megatron-Core release (0.18, or 0.19 and later: the default).
//  vllm:tp=,pp=,partition=,dp=,ep=,engines=,placement=linear|round_robin,redundant=,eplb_map=,
//       quant=none|fp8_block,scale_fmt=float32|ue8m0|ue8m0_packed,mtp=
//      ranks = tp*pp*dp*engines
//      (tools/models/vllm_layout.h). pp: --pipeline-parallel-size; partition: the layers of each PP
//      rank as VLLM_PP_LAYER_PARTITION gives them, '.'-separated ("partition=3.2" for "3,2";
//      tools/models/vllm_pipeline.h). ep is 1 (vLLM's default: each expert's FFN split over all
//      tp*dp ranks) or tp*dp (--enable-expert-parallel: whole experts per rank); placement is
//      vLLM's --expert-placement-strategy; redundant: EPLB's num_redundant_experts; quant:
//      the checkpoint's FP8 block quantization; scale_fmt: its scales as the engine holds them
//      (ue8m0: DeepGEMM's power-of-two scales, VLLM_USE_DEEP_GEMM_E8M0, on SM90; ue8m0_packed:
//      the same on SM100, packed as DeepGEMM keeps them there); mtp: the MTP drafter of speculative decoding
//      (speculative_config method "deepseek_mtp"/"mtp"), which holds every MTP layer of the
//      checkpoint (tools/models/vllm_layout.h).
//  sglang:tp=,pp=,dp=,attn_dp=,dp_attention=yes|no,ep=,redundant=,engines=,dense_tp=,
//         dp_lm_head=yes|no,shared_experts=fused|separate,quant=none|fp8_block
//      ranks = tp*dp*engines (tools/models/sglang_spec.h, tools/models/sglang_layout.h): SGLang's
//      --tp-size, --dp-size, --attn-dp-size (or the older --dp-size N --enable-dp-attention,
//      which is attn_dp=N), --ep-size (dividing tp), --ep-num-redundant-experts,
//      --moe-dense-tp-size, --enable-dp-lm-head and --disable-shared-experts-fusion; quant: the
//      checkpoint's FP8 block quantization, its scales float32 as SGLang keeps them on Hopper.
//  Any framework: expert_tensors=stacks|members (FrameworkSpec::stack_expert_tensors).
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/base/fp8_scale_format.h"
#include "core/base/status.h"
#include "tools/models/megatron_expert_storage.h"
#include "tools/models/pipeline_stages.h"
#include "tools/models/presets.h"
#include "tools/models/sglang_spec.h"

namespace ferry::models {

struct MegatronParallel {
  int tp = 1, pp = 1, ep = 1;
  // Layers of the first / last pipeline stage (Megatron's --decoder-first-pipeline-num-layers /
  // --decoder-last-pipeline-num-layers); 0: not given, the stages split the layers evenly.
  int first = 0, last = 0;
  // Interleaving: model chunks per pipeline rank (--num-virtual-stages-per-pipeline-rank) or layers
  // per chunk (--num-layers-per-virtual-pipeline-stage); 0: not given.
  int vstages = 0, vstage_layers = 0;
  // Megatron's explicit --pipeline-model-parallel-layout string (tools/models/pipeline_layout.h);
  // empty: not given.
  std::string layout;
  // A hybrid model's --hybrid-layer-pattern with '|' pipeline stage boundaries
  // (tools/models/hybrid_pipeline_stages.h); empty: the model's pattern without any.
  std::string hybrid_pattern;
  int etp = 0;  // 0: same as tp
  int dp = 0;   // 0: smallest dp with tp*cp*dp a multiple of ep*etp
  int cp = 1;
  // Which Megatron-Core expert module holds a rank's local experts of a layer, and so their
  // parameters (tools/models/megatron_expert_storage.h). Default: Megatron-Core's own
  // (moe_grouped_gemm=False: SequentialMLP).
  MegatronExpertStorage experts = MegatronExpertStorage::kSequential;
  // Vocabulary padding of the embedding and output layer. pad_vocab (Megatron-LM's default): the
  // vocabulary is padded to a multiple of vocab_divisible_by * tp, every TP rank holding
  // padded / tp rows, the padding rows last; !pad_vocab (Megatron-Bridge's should_pad_vocab=False):
  // the checkpoint's vocabulary as is, which tp must divide.
  int vocab_divisible_by = 128;
  bool pad_vocab = true;
  // Where the parameters live: false, each in its own tensor (plain DDP, the default); true
  // ("buffers=distopt", --use-distributed-optimizer), in the DDP contiguous param_data buffers of
  // each model chunk at the distributed optimizer's offsets (tools/models/megatron_param_buffers.h).
  bool distopt_buffers = false;
  // --overlap-grad-reduce: buckets in the distributed optimizer's buffers ("overlap_grad_reduce=yes").
  bool overlap_grad_reduce = false;
  // "mcore=0.N": the Megatron-Core release the trainer runs, where releases differ in what ferry
  // models: before 0.19 the Mamba mixer's conv1d is a child module, so the distributed
  // optimizer's buffers hold its parameters after in_proj's (tools/models/megatron_param_buffers.h).
  // 19 (the default) stands for 0.19 and later; 18 is the one earlier release modelled.
  int mcore_minor = 19;
  // --mtp-num-layers ("mtp=N"; 0, the default, Megatron's None): the first N of the checkpoint's
  // MTP layers, as the MTP block `mtp.layers.<i>` on the stage MegatronPipelineFor places it.
  int mtp = 0;
  // --mtp-use-repeated-layer ("mtp_repeated=1"): the MTP block builds one layer, mtp.layers.0 (the
  // checkpoint's first MTP layer), and applies it mtp times
  // (megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionBlock._build_layers,
  // megatron/core/models/gpt/gpt_layer_specs.py get_gpt_mtp_block_spec). A layout string still
  // counts mtp 'm's (pipeline_parallel_layer_layout.py validate_layer_layout).
  bool mtp_repeated = false;
  // The MTP layers the trainer holds: 1 with mtp_repeated, else mtp.
  int MtpLayersBuilt() const { return mtp_repeated && mtp > 0 ? 1 : mtp; }
};

// The pipeline arguments of `m` (tools/models/pipeline_stages.h).
MegatronPipelineArgs PipelineArgs(const MegatronParallel& m);

// Where Megatron puts each decoder layer of model `c` under `m`: its hybrid layer pattern's split
// for a hybrid model (tools/models/hybrid_pipeline_stages.h), the GPT split otherwise
// (tools/models/pipeline_stages.h); or Megatron's reason for rejecting `m`.
Result<MegatronPipeline> MegatronPipelineFor(const ModelConfig& c, const MegatronParallel& m);

struct VllmParallel {
  int tp = 1, dp = 1, ep = 1;
  // --pipeline-parallel-size: each engine's decoder layers split over pp stages of tp ranks
  // (tools/models/vllm_pipeline.h), the expert-parallel group of a stage its tp*dp ranks.
  int pp = 1;
  // VLLM_PP_LAYER_PARTITION ("partition=a.b.c"): the layers of each PP rank; empty: vLLM's own
  // split.
  std::vector<int> partition;
  // Independent engine instances, each of tp*dp ranks holding a whole copy of the model (the usual
  // RL rollout fleet: "TP32 x DP8" there means 8 engines of 32 GPUs). Within one engine, dp is
  // vLLM's own data parallelism, whose MoE layers span all of the engine's tp*dp ranks.
  int engines = 1;
  // vLLM's --expert-placement-strategy: false "linear" (the default: an EP rank's experts are
  // consecutive), true "round_robin" (EP rank r holds experts r, r + ep, ...).
  bool round_robin_experts = false;
  // EPLB's redundant experts (--enable-eplb with num_redundant_experts, "redundant=N"): the ep
  // ranks hold E + N physical experts placed linearly, physical p holding logical expert p for
  // p < E and (p - E) mod E after (vllm/distributed/eplb/eplb_state.py
  // build_initial_global_physical_to_logical_map): replicas of those experts. E + N must divide
  // by ep (vllm/model_executor/layers/fused_moe/eplb_manager.py validate_configuration).
  int redundant_experts = 0;
  // "eplb_map=PATH": after EPLB rearranged the experts, the engine's current
  // physical_to_logical_map (tools/models/eplb_map.h; with pp > 1 one per PP rank; with mtp the
  // drafter's own map too) in place of the initial arrangement above.
  std::string eplb_map;
  // "quant=fp8_block": the checkpoint is FP8 block-quantized (quantization_config fp8,
  // weight_block_size [128, 128]) and vLLM holds its projections so
  // (tools/models/fp8_block_weights.h); plans quantize into them (planner/block_quantize.h).
  bool fp8_block_weights = false;
  // "scale_fmt=float32|ue8m0|ue8m0_packed" (with quant=fp8_block): ue8m0 when the engine runs
  // DeepGEMM with E8M0 scales (VLLM_USE_DEEP_GEMM_E8M0; vllm/utils/deep_gemm.py
  // is_deep_gemm_e8m0_used) on SM90, which requantizes the weights it runs to power-of-two scales
  // after loading (tools/models/fp8_block_weights.h RequantizedToUe8m0, core/base/fp8_block.h);
  // ue8m0_packed the same on SM100 (Blackwell), where those scales are then kept as DeepGEMM's
  // packed int32 codes (DeepGemmQuantScaleFMT.UE8M0, core/base/fp8_packed_scales.h).
  Fp8ScaleFormat fp8_scale_fmt = Fp8ScaleFormat::kFloat32;
  // "mtp=N": the engine serves with MTP speculative decoding, its drafter holding the checkpoint's
  // N MTP layers (all of them: vLLM builds num_nextn_predict_layers drafter layers); 0: none. The
  // drafter's experts take redundant/eplb_map as the target's do, its decoder layer quant.
  int mtp = 0;
};

struct FrameworkSpec {
  enum class Kind { kMegatron, kVllm, kSglang };
  Kind kind = Kind::kMegatron;
  MegatronParallel megatron;
  VllmParallel vllm;
  SglangParallel sglang;
  // How the layout names a MoE layer's routed experts ("expert_tensors=stacks|members", either
  // framework): true (the default), as one tensor stack per projection,
  // "model.layers.<l>.mlp.experts.[0:E].gate_proj.weight" of shape [E, ...] (core/layout/
  // tensor_stack.h), the way both frameworks store them; false, as the checkpoint's E tensors
  // "model.layers.<l>.mlp.experts.<e>.gate_proj.weight". The bytes and buffers are the same either
  // way; layouts that name experts alike plan fastest (docs/planner.md).
  bool stack_expert_tensors = true;

  // Canonical text, e.g. "megatron:tp=2,pp=4,ep=16,etp=2,dp=16,cp=1" or
  // "vllm:tp=8,dp=2,ep=16" (",pp=N" and ",engines=N" when N > 1, ",partition=a.b" when given)
  // or "sglang:tp=8,dp=1,attn_dp=8,ep=8" (dp and ep always, the other keys when not their
  // defaults); ",expert_tensors=members" when not stacked.
  std::string ToString() const;
};

// Every key either framework's spec takes, with its values: for help texts and errors.
std::string FrameworkSpecKeys();

// Parses "megatron:tp=2,pp=4,ep=16", "vllm:tp=8,dp=2,ep=16" or "sglang:tp=8,ep=8". Unknown keys, repeated keys,
// non-positive or non-numeric values are errors.
Result<FrameworkSpec> ParseFrameworkSpec(const std::string& text);

// Fills the defaults (Megatron etp and dp) for `model` and checks every divisibility the framework
// needs (heads, KV groups, FFN sizes, experts, Mamba heads and groups, layers vs pipeline stages)
// and that the model carries the MTP layers asked for.
Result<FrameworkSpec> ResolveFrameworkSpec(const FrameworkSpec& spec, const ModelConfig& model);

// The MTP layers `spec` holds (its megatron, vllm or sglang mtp).
int MtpLayers(const FrameworkSpec& spec);

// Number of ranks of a resolved spec.
int NumRanks(const FrameworkSpec& resolved);

}  // namespace ferry::models
