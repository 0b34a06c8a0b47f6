// `ferry layout --explain` (tools/models/layout_explain.h): the rules behind one tensor's
// fragments, matched on its checkpoint name, and the fragments themselves.
#include "tools/models/layout_explain.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "core/base/element_fn.h"
#include "core/base/strings.h"
#include "core/layout/tensor_stack.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/sglang_explain.h"
#include "tools/models/vllm_pipeline.h"

namespace ferry::models {

namespace {

const char* kMegatron = "NVIDIA/Megatron-LM ";
const char* kBridge = "NVIDIA-NeMo/Megatron-Bridge ";
const char* kVllm = "vllm-project/vllm ";

bool Has(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

std::string N(int64_t v) { return std::to_string(v); }

void VocabRules(const ModelConfig& c, const FrameworkSpec& r, std::vector<LayoutRule>& out) {
  if (r.kind == FrameworkSpec::Kind::kVllm) {
    out.push_back({"vocabulary padded to a multiple of 64, then split into tp=" + N(r.vllm.tp) +
                       " equal row blocks; padding rows at the end",
                   std::string(kVllm) + "vllm/model_executor/layers/vocab_parallel_embedding.py"});
    if (c.tie_embeddings) {
      out.push_back({"tied: lm_head is embed_tokens, one buffer",
                     std::string(kVllm) + "vllm/model_executor/models/llama.py"});
    }
    return;
  }
  const MegatronParallel& m = r.megatron;
  if (m.pad_vocab) {
    out.push_back({"vocabulary padded to a multiple of vocab_divisible_by*tp = " +
                       N(int64_t{m.vocab_divisible_by} * m.tp) + ", split into tp equal blocks",
                   std::string(kMegatron) + "megatron/core/tokenizers/utils/build_tokenizer.py"});
  } else {
    out.push_back({"vocabulary unpadded (should_pad_vocab=False), split into tp equal blocks",
                   std::string(kBridge) + "src/megatron/bridge/models/gpt_provider.py"});
  }
  out.push_back({"embedding on the first stage, output layer on the last",
                 std::string(kMegatron) + "megatron/core/models/gpt/gpt_model.py"});
}

// Qwen2's q/k/v biases: fused like the weight's rows, in the bias parameter of the same module.
void QkvBiasRule(bool vllm, std::vector<LayoutRule>& out) {
  if (vllm) {
    out.push_back({"q/k/v biases: qkv_proj.bias, a rank's rows fused as the weight's",
                   std::string(kVllm) + "vllm/model_executor/models/qwen2.py"});
  } else {
    out.push_back({"q/k/v biases (add_qkv_bias): linear_qkv.bias, interleaved per query group as "
                   "the weight's rows",
                   std::string(kBridge) + "src/megatron/bridge/models/qwen/qwen2_bridge.py"});
  }
}

void AttentionRules(const FrameworkSpec& r, const ModelConfig& c, const std::string& t,
                    std::vector<LayoutRule>& out) {
  const bool vllm = r.kind == FrameworkSpec::Kind::kVllm;
  if (Has(t, "q_proj.") || Has(t, "k_proj.") || Has(t, "v_proj.")) {
    if (vllm) {
      out.push_back({"qkv_proj per TP rank = [its q heads; its KV heads (k); (v)]" +
                         std::string(r.vllm.tp > c.num_kv_heads
                                         ? "; each KV head replicated on tp/kv ranks"
                                         : ""),
                     std::string(kVllm) + "vllm/model_executor/layers/linear.py"});
    } else {
      out.push_back({"linear_qkv interleaved per query group [q heads; k; v], groups split by tp",
                     std::string(kMegatron) + "megatron/core/transformer/attention.py"});
    }
    if (Has(t, "_proj.bias")) QkvBiasRule(vllm, out);
  } else if (Has(t, "o_proj.")) {
    out.push_back({"row-parallel: columns split by tp",
                   vllm ? std::string(kVllm) + "vllm/model_executor/layers/linear.py"
                        : std::string(kMegatron) + "megatron/core/tensor_parallel/layers.py"});
  } else if (Has(t, "_a_proj") || Has(t, "_b_proj") || Has(t, "a_layernorm")) {
    out.push_back({vllm ? "MLA: fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa] replicated, "
                          "q_b/kv_b column-parallel by head"
                        : "MLA: down projections duplicated, norms fused into the up "
                          "projections, up projections column-parallel by head",
                   vllm ? std::string(kVllm) + "vllm/model_executor/models/deepseek_v2.py"
                        : std::string(kMegatron) +
                              "megatron/core/transformer/multi_latent_attention.py"});
  }
}

void ExpertRules(const FrameworkSpec& r, const std::string& t, std::vector<LayoutRule>& out) {
  if (r.kind == FrameworkSpec::Kind::kVllm) {
    out.push_back({r.vllm.ep == 1 ? "FusedMoE without expert parallelism: every expert's FFN "
                                    "split over all tp*dp ranks (w13 = [gate_i; up_i], w2)"
                                  : r.vllm.round_robin_experts
                                        ? "FusedMoE with expert parallelism, ep = tp*dp, "
                                          "round-robin: rank r holds experts r, r + ep, ..."
                                        : "FusedMoE with expert parallelism, ep = tp*dp: whole "
                                          "experts a rank, the first E mod ep ranks one more",
                   std::string(kVllm) + "vllm/model_executor/layers/fused_moe/config.py"});
    if (r.vllm.redundant_experts > 0) {
      out.push_back({"EPLB: " + N(r.vllm.redundant_experts) + " redundant physical experts after "
                     "the E logical ones, physical p holding logical (p - E) mod E; placed "
                     "linearly with them",
                     std::string(kVllm) + "vllm/distributed/eplb/eplb_state.py"});
    }
    if (!r.vllm.eplb_map.empty()) {
      out.push_back({"EPLB map " + r.vllm.eplb_map + ": each local slot holds the logical expert "
                     "the engine's physical_to_logical_map names" +
                         (r.vllm.pp > 1 ? std::string(", from the map of the layer's PP rank, "
                                                      "row = its index among that rank's MoE "
                                                      "layers")
                                        : std::string()),
                     std::string(kVllm) + (r.vllm.pp > 1 ? "vllm/model_executor/models/qwen3_moe.py"
                                                          : "vllm/distributed/eplb/eplb_state.py")});
    }
    return;
  }
  out.push_back({std::string("experts=") + ExpertStorageName(r.megatron.experts) +
                     ": EP rank r holds experts [r*E/ep, (r+1)*E/ep), each FFN split over etp",
                 std::string(kMegatron) + "megatron/core/transformer/moe/experts.py"});
  if (Has(t, "[")) out.push_back({"named as a tensor stack of all experts", "ferry"});
}

void OtherRules(const ModelConfig& c, const FrameworkSpec& r, const std::string& t,
                std::vector<LayoutRule>& out) {
  const bool vllm = r.kind == FrameworkSpec::Kind::kVllm;
  if (Has(t, "mixer.") && c.family == ModelFamily::kNemotronH && !Has(t, "proj.weight")) {
    out.push_back({"Mamba-2 mixer split by head and group over tp",
                   vllm ? std::string(kVllm) + "vllm/model_executor/layers/mamba/mamba_mixer2.py"
                        : std::string(kMegatron) + "megatron/core/ssm/mamba_mixer.py"});
    if (vllm && Has(t, "A_log")) {
      out.push_back({"stored transformed: A = -exp(A_log) in fp32; plans send A_log and apply it on "
                     "the destination rank",
                     std::string(kVllm) + "vllm/model_executor/layers/mamba/mamba_mixer2.py"});
    }
  } else if (Has(t, "mixer.in_proj")) {
    out.push_back({"Mamba-2 in_proj per TP rank = [z_i; x_i; B_i; C_i; dt_i]",
                   std::string(kMegatron) + "megatron/core/ssm/mamba_mixer.py"});
  } else if (Has(t, "gate_proj.") || Has(t, "up_proj.")) {
    out.push_back({"[gate_i; up_i] per TP rank in one fc1 / gate_up_proj buffer",
                   vllm ? std::string(kVllm) + "vllm/model_executor/layers/linear.py"
                        : std::string(kBridge) +
                              "src/megatron/bridge/models/conversion/param_mapping.py"});
  } else if (Has(t, "down_proj.") || Has(t, "out_proj.")) {
    out.push_back({"row-parallel: columns split by tp",
                   vllm ? std::string(kVllm) + "vllm/model_executor/layers/linear.py"
                        : std::string(kMegatron) + "megatron/core/tensor_parallel/layers.py"});
  } else if (Has(t, "mlp.gate.")) {
    out.push_back({"router weight (and fp32 score-correction bias) whole on every rank",
                   vllm ? std::string(kVllm) + "vllm/model_executor/models/deepseek_v2.py"
                        : std::string(kMegatron) + "megatron/core/transformer/moe/router.py"});
  } else if (Has(t, "norm")) {
    out.push_back({"norm weight whole on every TP rank", "ferry (replicated)"});
  }
  if (Has(t, "shared_experts")) {
    out.push_back({"shared experts: a dense MLP split over the TP group",
                   vllm ? std::string(kVllm) + "vllm/model_executor/models/deepseek_v2.py"
                        : std::string(kMegatron) +
                              "megatron/core/transformer/moe/shared_experts.py"});
  }
}

// The layer number of a "model.layers.<n>." name, or -1.
int64_t LayerNumber(const std::string& t) {
  const std::string head = "model.layers.";
  if (t.rfind(head, 0) != 0) return -1;
  size_t end = head.size();
  while (end < t.size() && std::isdigit(static_cast<unsigned char>(t[end]))) ++end;
  if (end == head.size() || end - head.size() > 9 || end >= t.size() || t[end] != '.') return -1;
  return std::stoll(t.substr(head.size(), end - head.size()));
}

// Where an MTP layer's tensor lives (layer num_layers + i of the checkpoint).
void MtpRules(const ModelConfig& c, const FrameworkSpec& r, int64_t i, const std::string& t,
              std::vector<LayoutRule>& out) {
  if (r.kind == FrameworkSpec::Kind::kVllm) {
    out.push_back({"MTP drafter layer " + N(c.num_layers + i) + " on the last PP rank's ranks: "
                   "enorm, hnorm, eh_proj, shared_head.norm and mtp_block (a decoder layer "
                   "sharded as the target's); shared_head.head is the target's lm_head",
                   std::string(kVllm) + "vllm/v1/worker/gpu_model_runner.py"});
    if (Has(t, ".eh_proj.")) {
      out.push_back({std::string("eh_proj: a replicated linear, the whole [h, 2h] on every rank") +
                         (r.vllm.fp8_block_weights ? "; a plain nn.Linear without the quant_config, "
                                                     "so in the model's dtype under quant=fp8_block"
                                                   : ""),
                     std::string(kVllm) + "vllm/model_executor/models/deepseek_mtp.py"});
    }
    if (Has(t, ".mlp.experts.") && !r.vllm.eplb_map.empty()) {
      out.push_back({"the drafter is a model of its own in EplbState (add_model): its experts "
                     "follow the map's \"drafter\" rows, one per drafter MoE layer",
                     std::string(kVllm) + "vllm/v1/worker/gpu_model_runner.py"});
    }
    return;
  }
  const MegatronParallel& m = r.megatron;
  out.push_back({"MTP layer " + N(i) + " as mtp.layers." + N(i) + " (enorm, hnorm, eh_proj, "
                 "mtp_model_layer, final_layernorm = shared_head.norm) on " +
                     (m.layout.empty() ? std::string("the last virtual stage of the last "
                                                     "pipeline rank")
                                       : "the stage of the layout's 'm'"),
                 std::string(kMegatron) + "megatron/core/transformer/multi_token_prediction.py"});
  out.push_back({"checkpoint model.layers." + N(c.num_layers + i) + ".* <-> mtp.layers." + N(i) +
                     ".*, the decoder layer under mtp_model_layer",
                 std::string(kBridge) + "src/megatron/bridge/models/deepseek/common.py"});
  if (m.mtp_repeated) {
    out.push_back({"--mtp-use-repeated-layer: one MTP layer, mtp.layers.0, applied " + N(m.mtp) +
                       " times",
                   std::string(kMegatron) + "megatron/core/transformer/multi_token_prediction.py"});
  }
  if (Has(t, ".eh_proj.")) {
    out.push_back({"eh_proj: ColumnParallelLinear(2h -> h), output rows split by tp",
                   std::string(kMegatron) + "megatron/core/transformer/multi_token_prediction.py"});
  }
}

// How a Megatron spec assigns a hybrid model's layers to pipeline ranks and model chunks.
LayoutRule HybridPipelineRule(const MegatronParallel& m) {
  const std::string where =
      std::string(kMegatron) + "megatron/core/models/hybrid/hybrid_layer_allocation.py";
  if (!m.hybrid_pattern.empty()) {
    return {"pipeline stage: --hybrid-layer-pattern " + m.hybrid_pattern +
                " ('|' segment i: chunk i/pp of rank i%pp); local layer numbers per segment",
            where};
  }
  return {"pipeline stage: hybrid pattern without '|' split " +
              (m.first > 0 || m.last > 0 ? "first=" + N(m.first) + ", last=" + N(m.last) +
                                               ", the rest even"
                                         : "evenly over pp=" + N(m.pp)) +
              "; local layer numbers per stage",
          where};
}

// How a Megatron spec assigns layers to pipeline ranks and model chunks, in words.
std::string PipelineRule(const MegatronParallel& m) {
  if (!m.layout.empty()) return "explicit layout " + m.layout + " (stage i: chunk i/pp of rank i%pp)";
  std::string s = m.first > 0 || m.last > 0
                      ? "first=" + N(m.first) + ", last=" + N(m.last) + ", the rest even"
                      : "layers split evenly over pp=" + N(m.pp);
  if (m.vstages > 0) s += ", " + N(m.vstages) + " interleaved model chunks a rank";
  if (m.vstage_layers > 0) s += ", interleaved chunks of " + N(m.vstage_layers) + " layers";
  return s;
}

// Which PP ranks of a vLLM engine hold tensor `t`: a decoder layer by get_pp_indices (or the
// explicit partition), the embedding, final norm and lm_head by the model's vLLM class.
void VllmPipelineRule(const ModelConfig& c, const VllmParallel& v, const std::string& t,
                      std::vector<LayoutRule>& out) {
  if (v.pp == 1) return;
  if (Has(t, ".layers.")) {
    out.push_back({"pipeline stage: " + (v.partition.empty()
                                             ? "layers / pp on each PP rank, the remainder one "
                                               "each to the ranks before the last"
                                             : "VLLM_PP_LAYER_PARTITION " +
                                                   PipelinePartitionText(v.partition)),
                   std::string(kVllm) + "vllm/distributed/utils.py"});
    return;
  }
  std::string ranks;
  for (int s = 0; s < v.pp; ++s) {
    const VllmStageModules m = VllmModulesOnStage(c, s, v.pp);
    const bool here = Has(t, "embed") ? m.embed_tokens : Has(t, "lm_head") ? m.lm_head : m.norm;
    if (here) ranks += (ranks.empty() ? "" : ", ") + N(s);
  }
  const char* model_file = c.family == ModelFamily::kLlama        ? "llama.py"
                           : c.family == ModelFamily::kQwen3Moe   ? "qwen3_moe.py"
                           : c.family == ModelFamily::kDeepseekV3 ? "deepseek_v2.py"
                                                                  : "nemotron_h.py";
  out.push_back({"on PP rank(s) " + ranks + " (rank = (dp*pp + pp_rank)*tp + tp_rank)",
                 std::string(kVllm) + "vllm/model_executor/models/" + model_file +
                     ", vllm/distributed/parallel_state.py"});
}

// The extra copies of the embedding that a pipeline with MTP layers keeps.
void MtpEmbeddingRules(const FrameworkSpec& r, std::vector<LayoutRule>& out) {
  if (r.kind == FrameworkSpec::Kind::kVllm && r.vllm.mtp > 0 && r.vllm.pp > 1) {
    out.push_back({"the MTP drafter on the last PP rank loads its own copy of the embedding "
                   "(shared with the target only when pp = 1)",
                   std::string(kVllm) + "vllm/v1/spec_decode/llm_base_proposer.py"});
  }
  if (r.kind == FrameworkSpec::Kind::kMegatron && r.megatron.mtp > 0 && r.megatron.pp > 1) {
    out.push_back({"the MTP block's stage keeps its own copy of the embedding (mtp_process), kept "
                   "equal to the first stage's",
                   std::string(kMegatron) + "megatron/core/models/gpt/gpt_model.py"});
  }
}

// Where a layer tensor's layer sits: an MTP layer's rules, or Megatron's pipeline stage.
void LayerStageRules(const ModelConfig& c, const FrameworkSpec& r, const std::string& t,
                     std::vector<LayoutRule>& out) {
  const int64_t number = LayerNumber(t);
  if (number >= c.num_layers && MtpLayers(r) > number - c.num_layers) {
    MtpRules(c, r, number - c.num_layers, t, out);
  } else if (Has(t, ".layers.") && r.kind == FrameworkSpec::Kind::kMegatron &&
             c.family == ModelFamily::kNemotronH) {
    out.push_back(HybridPipelineRule(r.megatron));
  } else if (Has(t, ".layers.") && r.kind == FrameworkSpec::Kind::kMegatron) {
    const MegatronParallel& m = r.megatron;
    out.push_back({"pipeline stage: " + PipelineRule(m) + "; local layer numbers per model chunk",
                   std::string(kMegatron) +
                       (m.layout.empty()
                            ? "megatron/core/transformer/transformer_block.py"
                            : "megatron/core/transformer/pipeline_parallel_layer_layout.py")});
  }
}

// What the module a tensor belongs to does with it: experts, attention, the rest.
void ModuleRules(const ModelConfig& c, const FrameworkSpec& r, const std::string& t,
                 std::vector<LayoutRule>& out) {
  const bool layer = Has(t, ".layers.");
  if (Has(t, ".mlp.experts.")) {
    ExpertRules(r, t, out);
  } else if (Has(t, "self_attn.") || (Has(t, "mixer.") && Has(t, "_proj") &&
                                      (Has(t, "q_proj") || Has(t, "k_proj") ||
                                       Has(t, "v_proj") || Has(t, "o_proj")))) {
    AttentionRules(r, c, t, out);
  }
  if (!Has(t, ".mlp.experts.") && !Has(t, "self_attn.") && layer) OtherRules(c, r, t, out);
  if (Has(t, "self_attn.") && Has(t, "norm")) OtherRules(c, r, t, out);
}

// vLLM's FP8 block-quantized storage of tensor `t` (quant=fp8_block) and its scale format.
void Fp8BlockRules(const VllmParallel& v, const std::string& t, std::vector<LayoutRule>& out) {
  if (!v.fp8_block_weights || !IsFp8BlockQuantized(t)) return;
  out.push_back({"quant=fp8_block: fp8 e4m3, one byte an element, with fp32 weight_scale_inv "
                 "per 128x128 block of the rank's partition; the reshard plan quantizes into it "
                 "(Quantize ops, planner/block_quantize.h)",
                 std::string(kVllm) + "vllm/model_executor/layers/quantization/fp8.py"});
  if (Fp8ScaleIsUe8m0(v.fp8_scale_fmt)) {
    out.push_back({"scale_fmt=" + std::string(Fp8ScaleFormatName(v.fp8_scale_fmt)) +
                       ": where DeepGEMM runs the weight (experts; linear partitions "
                       "of rows % 64 == 0 and cols % 128 == 0), weight_scale_inv holds powers of two "
                       "and the fp8 values are requantized to them after loading",
                   std::string(kVllm) + "vllm/model_executor/layers/quantization/utils/fp8_utils.py"});
  }
  if (v.fp8_scale_fmt == Fp8ScaleFormat::kUe8m0Packed) {
    out.push_back({"scale_fmt=ue8m0_packed: on SM100 DeepGEMM's transform_sf_into_required_layout "
                   "replaces those weight_scale_inv by int32 [rows, ceil(cols/512)], MN-major with "
                   "rows aligned to 4, four E8M0 codes a word (byte j: block column 4p + j), each "
                   "weight row its block row's codes",
                   std::string(kVllm) + "vllm/model_executor/layers/quantization/utils/fp8_utils.py "
                   "deepgemm_post_process_weight_scale_block; deepseek-ai/DeepGEMM csrc/apis/layout.hpp"});
  }
}

// Megatron's distributed-optimizer buffers (buffers=distopt): where a parameter sits in them.
void DistoptRules(const ModelConfig& c, const MegatronParallel& m, const std::string& t,
                  std::vector<LayoutRule>& out) {
  if (!m.distopt_buffers) return;
  out.push_back({"buffers=distopt: in its model chunk's DDP param_data buffer, parameters in "
                 "reverse named_parameters() order, starts aligned to 64 elements, bucket ends "
                 "padded to lcm(dp, 128); experts in expert_parallel_buffers when ep > 1 or "
                 "etp != tp",
                 std::string(kMegatron) + "megatron/core/optimizer/distrib_optimizer.py"});
  if (m.mtp > 0) {
    out.push_back({"named_parameters(): embedding, decoder layers, final norm, MTP layers, output "
                   "layer; with pp > 1 the embedding (every copy) in a bucket of its own "
                   "(shared_embedding)",
                   std::string(kMegatron) + "megatron/core/models/gpt/gpt_model.py"});
  }
  if (c.family == ModelFamily::kNemotronH &&
      (Has(t, "mixer.conv1d.") || Has(t, "mixer.dt_bias") || Has(t, "mixer.A_log") ||
       Has(t, "mixer.D"))) {
    out.push_back({m.mcore_minor < 19
                       ? "mcore=0.18: Mamba mixer's own parameters (dt_bias, A_log, D), then "
                         "in_proj, the conv1d module (weight, bias), norm, out_proj in "
                         "named_parameters()"
                       : "Mamba mixer's own parameters (conv1d weight and bias, dt_bias, A_log, "
                         "D) come before its in_proj, norm and out_proj in named_parameters()",
                   std::string(kMegatron) + "megatron/core/ssm/mamba_mixer.py"});
  }
}

}  // namespace

std::vector<LayoutRule> RulesForTensor(const ModelConfig& c, const FrameworkSpec& r,
                                       const std::string& t) {
  if (r.kind == FrameworkSpec::Kind::kSglang) return SglangRulesForTensor(c, r.sglang, t);
  std::vector<LayoutRule> out;
  const bool layer = Has(t, ".layers.");
  if (!layer && (Has(t, "embed") || Has(t, "lm_head"))) VocabRules(c, r, out);
  if (!layer && Has(t, "embed")) MtpEmbeddingRules(r, out);
  LayerStageRules(c, r, t, out);
  ModuleRules(c, r, t, out);
  const bool vllm = r.kind == FrameworkSpec::Kind::kVllm;
  if (vllm) {
    VllmPipelineRule(c, r.vllm, t, out);
    Fp8BlockRules(r.vllm, t, out);
  } else {
    DistoptRules(c, r.megatron, t, out);
  }
  out.push_back({vllm ? "dp replicas copy the engine's TP group (MoE layers span tp*dp), engines "
                        "copy the whole engine"
                      : "dp and cp ranks hold replicas; experts replicated over expert-dp",
                 vllm ? std::string(kVllm) + "vllm/model_executor/layers/fused_moe/config.py"
                      : std::string(kMegatron) + "megatron/core/parallel_state.py"});
  return out;
}

Result<std::string> ExplainTensor(const ModelConfig& c, const FrameworkSpec& r,
                                  const Layout& layout, const std::string& tensor) {
  const Layout* l = &layout;
  Layout members;
  if (l->FindTensor(tensor) < 0 && Has(tensor, ".mlp.experts.")) {
    FERRY_ASSIGN_OR_RETURN(members, UnstackTensors(layout));
    l = &members;
  }
  const int t = l->FindTensor(tensor);
  if (t < 0) return NotFound("the layout has no tensor '" + tensor + "'");
  const TensorSpec& spec = l->tensors[t];
  std::ostringstream os;
  os << spec.name << " " << FormatInts(spec.shape) << " " << DTypeName(spec.dtype) << " under "
     << r.ToString() << "\n";
  std::vector<Fragment> frags;
  for (const Fragment& f : l->fragments) {
    if (f.tensor == t) frags.push_back(f);
  }
  std::stable_sort(frags.begin(), frags.end(),
                   [](const Fragment& a, const Fragment& b) { return a.loc.rank < b.loc.rank; });
  for (const Fragment& f : frags) {
    const std::vector<int64_t> strides(f.loc.strides.begin(), f.loc.strides.begin() + f.box.ndim);
    os << "  rank " << f.loc.rank << "  " << l->buffers[f.loc.buffer].name << "  "
       << f.box.ToString() << "  at byte " << f.loc.byte_offset << "  strides "
       << FormatInts(strides) << "\n";
  }
  for (const StoredTransform& s : l->transforms) {
    if (s.tensor != t) continue;
    const ElementFn fn = ElementFnOfTransform(s.transform);
    os << "  stored as " << s.transform << " (" << DTypeName(s.stored_dtype) << ")";
    if (fn != ElementFn::kNone) {
      os << ": plans send the source's values and apply it (Convert with " << ElementFnName(fn)
         << " on the destination rank)";
    }
    os << "\n";
  }
  os << "rules:\n";
  for (const LayoutRule& rule : RulesForTensor(c, r, spec.name)) {
    os << "  - " << rule.rule << "  [" << rule.upstream << "]\n";
  }
  return os.str();
}

}  // namespace ferry::models
