// Framework specs: parsing "megatron:..." / "vllm:..." text, the canonical text back, resolving a
// spec against a model (defaults and every divisibility the layouts rely on) and its rank count.
#include "tools/models/framework_spec.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/base/checked_math.h"
#include "core/base/strings.h"
#include "tools/models/hybrid_pipeline_stages.h"
#include "tools/models/pipeline_stages.h"
#include "tools/models/spec_checks.h"
#include "tools/models/vllm_pipeline.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

// Both frameworks build MTP layers from the checkpoint's num_nextn_predict_layers
// (src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py mtp_num_layers,
// vllm/model_executor/models/deepseek_mtp.py DeepSeekMultiTokenPredictor): none without them.
Status CheckMtp(int mtp, const ModelConfig& c) {
  if (mtp == 0) return Status::Ok();
  if (c.nextn_layers == 0) {
    return InvalidArgument("mtp=" + Num(mtp) + ": '" + c.name + "' has no multi-token prediction "
                           "layers (its config's num_nextn_predict_layers is 0)");
  }
  if (mtp > c.nextn_layers) {
    return InvalidArgument("mtp=" + Num(mtp) + ": '" + c.name + "' has " + Num(c.nextn_layers) +
                           " multi-token prediction layer(s) (num_nextn_predict_layers)");
  }
  return Status::Ok();
}

// Megatron: etp defaults to tp and dp to the smallest value whose stage fits ep*etp; pp must not
// exceed the layers, and heads, query groups, experts and the expert FFN must divide as the layout
// needs.
Status ResolveMegatron(MegatronParallel& m, const ModelConfig& c) {
  if (m.mtp_repeated && m.mtp == 0) {
    return InvalidArgument("mtp_repeated=1 without mtp=N: --mtp-use-repeated-layer repeats the "
                           "MTP layer mtp_num_layers times");
  }
  // megatron/core/transformer/multi_token_prediction.py: the repeated mode builds one layer
  FERRY_RETURN_IF_ERROR(CheckMtp(m.MtpLayersBuilt(), c));
  FERRY_RETURN_IF_ERROR(CheckWorld("megatron tp*pp*cp*max(dp,1)",
                                   SatMul(SatMul(m.tp, m.pp), SatMul(m.cp, std::max(m.dp, 1)))));
  FERRY_RETURN_IF_ERROR(CheckWorld("megatron ep*etp", SatMul(m.ep, std::max(m.etp, m.tp))));
  if (m.etp == 0) m.etp = m.tp;
  if (!c.IsMoe() && m.ep != 1) return InvalidArgument("the model has no experts; ep must be 1");
  if (m.dp == 0) {
    const int tpcp = m.tp * m.cp;
    m.dp = c.IsMoe() ? std::lcm(tpcp, m.ep * m.etp) / tpcp : 1;
    FERRY_RETURN_IF_ERROR(
        CheckWorld("megatron tp*pp*cp*dp", SatMul(SatMul(m.tp, m.pp), SatMul(m.cp, m.dp))));
  }
  Status st = MegatronPipelineFor(c, m).status();
  if (st.ok()) st = CheckTensorParallel(c, m.tp);
  if (st.ok() && !c.IsMla()) {
    st = CheckDivides("num_kv_heads (query groups)", c.num_kv_heads, "tp", m.tp);
  }
  if (st.ok()) {
    st = MegatronPaddedVocab(c.vocab, m.tp, m.vocab_divisible_by, m.pad_vocab).status();
  }
  if (st.ok() && m.overlap_grad_reduce && !m.distopt_buffers) {
    st = InvalidArgument("overlap_grad_reduce=yes only changes the distributed optimizer's "
                         "buffers; give buffers=distopt");
  }
  if (st.ok() && m.distopt_buffers && c.IsMoe() &&
      m.experts == MegatronExpertStorage::kLegacyGrouped) {
    // megatron/core/transformer/moe/experts.py GroupedMLP: last in core_v0.16.1, removed by
    // 2caa681a1d (core_v0.17.0); ferry reads the DDP buffers of 0.18 and later only
    st = InvalidArgument("buffers=distopt with experts=legacy_grouped: Megatron-Core's GroupedMLP "
                         "exists up to 0.16 only (removed in 0.17), and ferry models the "
                         "distributed optimizer's buffers of 0.18 and later");
  }
  if (st.ok() && c.IsMoe()) {
    st = CheckDivides("num_experts", c.num_experts, "ep", m.ep);
    if (st.ok()) st = CheckDivides("moe_intermediate", c.moe_intermediate, "etp", m.etp);
    if (st.ok()) {
      st = CheckDivides("tp*cp*dp (ranks per stage)", static_cast<int64_t>(m.tp) * m.cp * m.dp,
                        "ep*etp", static_cast<int64_t>(m.ep) * m.etp);
    }
  }
  return st;
}

// EPLB's redundant experts: vllm/config/parallel.py ParallelConfig._validate_parallel_config (EPLB
// needs expert parallelism over more than one rank) and
// vllm/model_executor/layers/fused_moe/expert_map_manager.py (no round-robin with redundant
// experts). Called with ep = tp*dp.
Status CheckRedundantExperts(const VllmParallel& v, const ModelConfig& c) {
  if (!v.eplb_map.empty() && v.round_robin_experts) {
    return InvalidArgument("eplb_map= with placement=round_robin: vLLM's EPLB numbers physical "
                           "experts linearly over the EP ranks");
  }
  const bool eplb = v.redundant_experts > 0 || !v.eplb_map.empty();
  const int64_t physical = c.num_experts + v.redundant_experts;
  // vllm/model_executor/layers/fused_moe/eplb_manager.py EplbManager.validate_configuration
  if (eplb && physical % v.ep != 0) {
    return InvalidArgument("EPLB currently only supports even distribution of experts across "
                           "ranks. Got " + Num(physical) + " experts and " + Num(v.ep) +
                           " EP ranks (vLLM's EplbManager.validate_configuration; redundant=" +
                           Num(v.redundant_experts) + ")");
  }
  if (v.redundant_experts == 0 || !v.eplb_map.empty()) return Status::Ok();  // the map decides
  if (v.round_robin_experts) {
    return InvalidArgument("vLLM supports round-robin expert placement only with no redundant "
                           "experts (it falls back to linear placement); drop "
                           "placement=round_robin or redundant=" + Num(v.redundant_experts));
  }
  if (physical / v.ep > c.num_experts) {
    return InvalidArgument("redundant=" + Num(v.redundant_experts) + " puts more than " +
                           Num(c.num_experts) + " physical experts on one rank, so a rank would "
                           "hold one logical expert twice, which ferry does not model");
  }
  return Status::Ok();
}

// vLLM's two MoE modes (vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make):
// without --enable-expert-parallel (ep=1) every expert's FFN is split over all tp*dp ranks; with it
// the expert-parallel size is tp*dp, each rank holding whole experts (uneven counts allowed, the
// first ranks one more). No other ep exists.
Status CheckVllmExpertParallel(const VllmParallel& v, const ModelConfig& c) {
  const int64_t world = static_cast<int64_t>(v.tp) * v.dp;
  if (v.ep != 1 && v.ep != world) {
    return InvalidArgument(
        "vLLM has no ep=" + Num(v.ep) + " for tp=" + Num(v.tp) + ", dp=" + Num(v.dp) +
        ": with --enable-expert-parallel its MoE layers' expert-parallel size is tp*dp = " +
        Num(world) + " (each rank holding whole experts); without it ep is 1 and every expert's "
        "FFN is split over all " + Num(world) + " ranks");
  }
  if ((v.redundant_experts > 0 || !v.eplb_map.empty()) && (v.ep == 1 || world <= 1)) {
    return InvalidArgument(world <= 1 ? "vLLM rejects redundant experts here: EPLB requires "
                                        "tensor, prefill-context, or data parallelism, but got "
                                        "TP=" + Num(v.tp) + ", DP=" + Num(v.dp)
                                      : "vLLM rejects redundant experts without expert "
                                        "parallelism: enable_expert_parallel must be True to use "
                                        "EPLB (give ep = tp*dp = " + Num(world) + ")");
  }
  if (v.ep == 1 && v.round_robin_experts) {
    return InvalidArgument("placement=round_robin places experts over expert-parallel ranks; "
                           "it needs ep = tp*dp > 1");
  }
  // vllm/model_executor/layers/fused_moe/layer.py determine_expert_placement_strategy
  if (v.round_robin_experts && c.expert_groups <= 1) {
    return InvalidArgument(
        "vLLM supports round-robin expert placement only for models with multiple expert groups "
        "and no redundant experts (it falls back to linear placement); '" + c.name + "' has " +
        Num(c.expert_groups) + " expert group(s)");
  }
  // vllm/model_executor/layers/fused_moe/expert_map_manager.py determine_expert_placement_strategy:
  // with dp > 1 the MoE layers run all-to-all kernels, and then round-robin placement needs the
  // DeepEP low-latency or NIXL EP ones (needs_round_robin_routing_tables)
  if (v.round_robin_experts && v.dp > 1) {
    return InvalidArgument(
        "vLLM places experts round-robin with dp > 1 only under the DeepEP low-latency or NIXL EP "
        "all-to-all backends, which ferry's layouts do not model; under its default backend "
        "(allgather_reducescatter) it falls back to linear placement: give placement=linear");
  }
  if (v.ep == 1) return CheckDivides("moe_intermediate", c.moe_intermediate, "tp*dp", world);
  return CheckRedundantExperts(v, c);
}

// What ferry does not model under vLLM's pipeline parallelism, refused rather than guessed.
Status CheckVllmPipeline(const VllmParallel& v, const ModelConfig& c) {
  if (v.pp == 1) return Status::Ok();
  // vllm/model_executor/models/qwen3_moe.py Qwen3MoeForCausalLM.__init__: a PP rank whose layers
  // hold no MoE block raises "No Qwen3MoE layer found in the model.layers."
  if (c.family == ModelFamily::kQwen3Moe) {
    FERRY_ASSIGN_OR_RETURN(const std::vector<int64_t> layers,
                           VllmPipelineLayers(c.num_layers, v.pp, v.partition));
    const std::vector<int64_t> moe = VllmStageMoeLayers(c, layers);
    for (size_t s = 0; s < moe.size(); ++s) {
      if (moe[s] == 0) {
        return InvalidArgument("vLLM rejects it: No Qwen3MoE layer found in the model.layers. "
                               "(PP rank " + Num(static_cast<int64_t>(s)) + " builds no MoE layer)");
      }
    }
  }
  // vllm/model_executor/models/deepseek_v2.py DeepseekV2ForCausalLM: num_moe_layers, the rows of
  // EplbState's maps, is num_hidden_layers - first_k_dense_replace on every PP rank while its
  // expert_weights are the rank's own MoE layers, so rearrange_expert_weights_inplace
  // (vllm/distributed/eplb/rebalance_execute.py, run by the profile run's EPLB step already)
  // fails its assert len(expert_weights) == num_moe_layers
  if (c.family == ModelFamily::kDeepseekV3 && (v.redundant_experts > 0 || !v.eplb_map.empty())) {
    return InvalidArgument("EPLB with pp=" + Num(v.pp) + ": vLLM's DeepseekV2ForCausalLM gives "
                           "every PP rank's EplbState num_hidden_layers - first_k_dense_replace "
                           "MoE layers but only its own layers' expert weights, and "
                           "rearrange_expert_weights_inplace asserts len(expert_weights) == "
                           "num_moe_layers");
  }
  // vllm/model_executor/models/deepseek_v2.py never ties lm_head to embed_tokens
  if (c.family == ModelFamily::kDeepseekV3 && c.tie_embeddings) {
    return InvalidArgument("tied embeddings with pp=" + Num(v.pp) + ": vLLM's DeepseekV2 model "
                           "builds its own lm_head on the last rank, which is not modelled");
  }
  return Status::Ok();
}

// vLLM: KV heads and tp divide one another (KV heads are replicated when tp exceeds them); the
// engine's tp*dp ranks split into ep expert owners, each expert's FFN over the rest.
Status ResolveVllm(const VllmParallel& v, const ModelConfig& c) {
  FERRY_RETURN_IF_ERROR(CheckWorld("vllm tp*pp*dp*engines",
                                   SatMul(SatMul(v.tp, v.pp), SatMul(v.dp, v.engines))));
  FERRY_RETURN_IF_ERROR(CheckWorld("vllm ep", v.ep));
  FERRY_RETURN_IF_ERROR(CheckMtp(v.mtp, c));
  FERRY_RETURN_IF_ERROR(VllmPipelineLayers(c.num_layers, v.pp, v.partition).status());
  FERRY_RETURN_IF_ERROR(CheckVllmPipeline(v, c));
  // vllm/model_executor/models/deepseek_mtp.py: the drafter builds every one of the checkpoint's
  // MTP layers
  if (v.mtp != 0 && v.mtp != c.nextn_layers) {
    return InvalidArgument("vLLM's MTP drafter holds every MTP layer of '" + c.name + "', " +
                           Num(c.nextn_layers) + " (num_nextn_predict_layers); give mtp=" +
                           Num(c.nextn_layers));
  }
  if (v.fp8_scale_fmt != Fp8ScaleFormat::kFloat32 && !v.fp8_block_weights) {
    return InvalidArgument("scale_fmt=" + std::string(Fp8ScaleFormatName(v.fp8_scale_fmt)) +
                           " without quant=fp8_block: only block-quantized weights have scales");
  }
  if (!c.IsMoe() && (v.ep != 1 || v.redundant_experts > 0 || !v.eplb_map.empty())) {
    return InvalidArgument("the model has no experts; ep must be 1 and redundant and eplb_map unset");
  }
  Status st = CheckTensorParallel(c, v.tp);
  if (st.ok() && !c.IsMla() && c.num_kv_heads % v.tp != 0 && v.tp % c.num_kv_heads != 0) {
    st = InvalidArgument("num_kv_heads " + Num(c.num_kv_heads) + " and tp " + Num(v.tp) +
                         " do not divide one another");
  }
  if (st.ok()) st = VllmPaddedVocab(c.vocab, v.tp).status();
  if (st.ok() && v.fp8_block_weights && c.family == ModelFamily::kNemotronH) {
    st = InvalidArgument("quant=fp8_block: FP8 block quantization of Mamba mixers is not modelled");
  }
  if (st.ok() && c.IsMoe()) st = CheckVllmExpertParallel(v, c);
  return st;
}

// "sglang:tp=8,dp=1,attn_dp=8,ep=8": tp, dp and ep, and the keys that differ from SGLang's
// defaults.
std::string SglangText(const SglangParallel& g) {
  return "sglang:tp=" + Num(g.tp) + (g.pp > 1 ? ",pp=" + Num(g.pp) : "") +
         (g.partition.empty() ? "" : ",partition=" + PipelinePartitionText(g.partition)) +
         ",dp=" + Num(g.dp) +
         (g.attn_dp > 1 ? ",attn_dp=" + Num(g.attn_dp) : "") +
         (g.dp_attention ? ",dp_attention=yes" : "") + ",ep=" + Num(g.ep) +
         (g.redundant_experts > 0 ? ",redundant=" + Num(g.redundant_experts) : "") +
         (g.eplb_map.empty() ? "" : ",eplb_map=" + g.eplb_map) +
         (g.engines > 1 ? ",engines=" + Num(g.engines) : "") +
         (g.dense_tp > 0 ? ",dense_tp=" + Num(g.dense_tp) : "") +
         (g.dp_lm_head ? ",dp_lm_head=yes" : "") +
         (g.shared_fused == 1 ? ",shared_experts=fused"
          : g.shared_fused == 0 ? ",shared_experts=separate"
                                : "") +
         (g.a2a != "none" ? ",a2a=" + g.a2a : "") + (g.mtp > 0 ? ",mtp=" + Num(g.mtp) : "") +
         (g.fp8_block_weights ? ",quant=fp8_block" : "");
}

}  // namespace

std::string FrameworkSpec::ToString() const {
  const std::string naming = stack_expert_tensors ? "" : ",expert_tensors=members";
  if (kind == Kind::kSglang) return SglangText(sglang) + naming;
  if (kind == Kind::kVllm) {
    return "vllm:tp=" + Num(vllm.tp) + (vllm.pp > 1 ? ",pp=" + Num(vllm.pp) : "") +
           (vllm.partition.empty() ? "" : ",partition=" + PipelinePartitionText(vllm.partition)) +
           ",dp=" + Num(vllm.dp) + ",ep=" + Num(vllm.ep) +
           (vllm.engines > 1 ? ",engines=" + Num(vllm.engines) : "") +
           (vllm.round_robin_experts ? ",placement=round_robin" : "") +
           (vllm.redundant_experts > 0 ? ",redundant=" + Num(vllm.redundant_experts) : "") +
           (vllm.eplb_map.empty() ? "" : ",eplb_map=" + vllm.eplb_map) +
           (vllm.fp8_block_weights ? ",quant=fp8_block" : "") +
           (vllm.fp8_scale_fmt != Fp8ScaleFormat::kFloat32
                ? ",scale_fmt=" + std::string(Fp8ScaleFormatName(vllm.fp8_scale_fmt))
                : "") +
           (vllm.mtp > 0 ? ",mtp=" + Num(vllm.mtp) : "") + naming;
  }
  const MegatronParallel& m = megatron;
  std::string s = "megatron:tp=" + Num(m.tp) + ",pp=" + Num(m.pp);
  if (m.first > 0) s += ",first=" + Num(m.first);
  if (m.last > 0) s += ",last=" + Num(m.last);
  if (m.vstages > 0) s += ",vstages=" + Num(m.vstages);
  if (m.vstage_layers > 0) s += ",vstage_layers=" + Num(m.vstage_layers);
  s += ",ep=" + Num(m.ep);
  if (m.etp > 0) s += ",etp=" + Num(m.etp);
  if (m.dp > 0) s += ",dp=" + Num(m.dp);
  s += ",cp=" + Num(m.cp);
  if (m.vocab_divisible_by != 128) s += ",vocab_divisible_by=" + Num(m.vocab_divisible_by);
  if (!m.pad_vocab) s += ",pad_vocab=no";
  if (m.experts != MegatronExpertStorage::kSequential) {
    s += std::string(",experts=") + ExpertStorageName(m.experts);
  }
  if (m.distopt_buffers) s += ",buffers=distopt";
  if (m.overlap_grad_reduce) s += ",overlap_grad_reduce=yes";
  if (m.mcore_minor != 19) s += ",mcore=0." + Num(m.mcore_minor);
  if (m.mtp > 0) s += ",mtp=" + Num(m.mtp);
  if (m.mtp_repeated) s += ",mtp_repeated=1";
  s += naming;
  if (!m.hybrid_pattern.empty()) s += ",pattern=" + m.hybrid_pattern;
  if (!m.layout.empty()) s += ",layout=" + m.layout;
  return s;
}

MegatronPipelineArgs PipelineArgs(const MegatronParallel& m) {
  return {m.pp, m.first, m.last, m.vstages, m.vstage_layers, m.layout, m.hybrid_pattern, m.mtp};
}

Result<MegatronPipeline> MegatronPipelineFor(const ModelConfig& c, const MegatronParallel& m) {
  if (c.family == ModelFamily::kNemotronH) {
    return MegatronHybridPipelineOf(c.hybrid_pattern, PipelineArgs(m));
  }
  if (!m.hybrid_pattern.empty()) {
    return InvalidArgument("pattern= is Megatron's --hybrid-layer-pattern, for hybrid (Mamba) "
                           "models; '" + c.name + "' is a GPT model");
  }
  return MegatronPipelineOf(c.num_layers, PipelineArgs(m));
}

namespace {

// One key of a spec: a positive integer stored in `number`, or a word that `word` checks and
// stores.
struct SpecKey {
  std::string name;
  int* number = nullptr;
  std::function<Status(const std::string&)> word;
  int min = 1;  // the least number the key takes
};

// A word-valued key accepting exactly `a` (sets *flag to flag_for_a) or `b`.
SpecKey WordKey(const std::string& name, const std::string& a, const std::string& b, bool* flag,
                bool flag_for_a) {
  return {name, nullptr, [=](const std::string& value) {
            if (value != a && value != b) {
              return InvalidArgument("bad value '" + value + "' for " + name + ": expected " + a +
                                     " or " + b);
            }
            *flag = (value == a) == flag_for_a;
            return Status::Ok();
          }};
}

// "mcore=0.N[.P]": the Megatron-Core release, as MegatronParallel::mcore_minor (18, or 19 for
// 0.19 and later). The releases whose module order ferry has read: megatron/core/ssm/
// mamba_mixer.py at core_v0.18.2 and core_v0.19.0; earlier ones are refused.
Result<int> ParseMcoreRelease(const std::string& value) {
  std::vector<int64_t> parts;
  size_t at = 0;
  while (at <= value.size() && parts.size() < 4) {
    const size_t dot = std::min(value.find('.', at), value.size());
    const std::string part = value.substr(at, dot - at);
    const bool digits = !part.empty() && part.size() <= 6 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) break;
    parts.push_back(std::strtol(part.c_str(), nullptr, 10));
    at = dot + 1;
  }
  if (at <= value.size() || parts.size() < 2 || parts.size() > 3 || parts[0] != 0) {
    return InvalidArgument("bad value '" + value + "' for mcore: expected a Megatron-Core release "
                           "0.N or 0.N.P");
  }
  if (parts[1] < 18) {
    return InvalidArgument("mcore=" + value + ": Megatron-Core releases before 0.18 are not "
                           "modelled (give 0.18, or 0.19 and later)");
  }
  return parts[1] >= 19 ? 19 : 18;
}

std::vector<SpecKey> MegatronKeys(FrameworkSpec& spec) {
  MegatronParallel& m = spec.megatron;
  return {{"tp", &m.tp, {}},
          {"pp", &m.pp, {}},
          {"first", &m.first, {}},
          {"last", &m.last, {}},
          {"vstages", &m.vstages, {}},
          {"vstage_layers", &m.vstage_layers, {}},
          {"ep", &m.ep, {}},
          {"etp", &m.etp, {}},
          {"dp", &m.dp, {}},
          {"cp", &m.cp, {}},
          {"mtp", &m.mtp, {}, 0},
          WordKey("mtp_repeated", "1", "0", &m.mtp_repeated, true),
          {"vocab_divisible_by", &m.vocab_divisible_by, {}},
          WordKey("pad_vocab", "yes", "no", &m.pad_vocab, true),
          WordKey("buffers", "distopt", "params", &m.distopt_buffers, true),
          WordKey("overlap_grad_reduce", "yes", "no", &m.overlap_grad_reduce, true),
          {"mcore", nullptr,
           [&m](const std::string& value) -> Status {
             FERRY_ASSIGN_OR_RETURN(m.mcore_minor, ParseMcoreRelease(value));
             return Status::Ok();
           }},
          {"pattern", nullptr,
           [&m](const std::string& value) -> Status {
             if (value.empty()) return InvalidArgument("empty pattern= in megatron spec");
             m.hybrid_pattern = value;
             return Status::Ok();
           }},
          {"experts", nullptr,
           [&m](const std::string& value) -> Status {
             FERRY_ASSIGN_OR_RETURN(m.experts, ParseExpertStorage(value));
             return Status::Ok();
           }},
          WordKey("expert_tensors", "stacks", "members", &spec.stack_expert_tensors, true)};
}

std::vector<SpecKey> VllmKeys(FrameworkSpec& spec) {
  VllmParallel& v = spec.vllm;
  return {{"tp", &v.tp, {}},
          {"pp", &v.pp, {}},
          {"partition", nullptr,
           [&v](const std::string& value) -> Status {
             FERRY_ASSIGN_OR_RETURN(v.partition,
                                    ParsePipelinePartition(value, "VLLM_PP_LAYER_PARTITION"));
             return Status::Ok();
           }},
          {"dp", &v.dp, {}},
          {"ep", &v.ep, {}},
          {"engines", &v.engines, {}},
          WordKey("placement", "round_robin", "linear", &v.round_robin_experts, true),
          {"redundant", &v.redundant_experts, {}},
          {"eplb_map", nullptr,
           [&v](const std::string& value) -> Status {
             if (value.empty()) return InvalidArgument("empty eplb_map= in vllm spec");
             v.eplb_map = value;
             return Status::Ok();
           }},
          {"mtp", &v.mtp, {}, 0},
          WordKey("quant", "fp8_block", "none", &v.fp8_block_weights, true),
          {"scale_fmt", nullptr,
           [&v](const std::string& value) -> Status {
             const std::optional<Fp8ScaleFormat> fmt = ParseFp8ScaleFormat(value);
             if (!fmt) {
               return InvalidArgument("bad value '" + value + "' for scale_fmt: expected " +
                                      std::string(kFp8ScaleFormatNames));
             }
             v.fp8_scale_fmt = *fmt;
             return Status::Ok();
           }},
          WordKey("expert_tensors", "stacks", "members", &spec.stack_expert_tensors, true)};
}

std::vector<SpecKey> SglangKeys(FrameworkSpec& spec) {
  SglangParallel& g = spec.sglang;
  return {{"tp", &g.tp, {}},
          {"pp", &g.pp, {}},
          {"partition", nullptr,
           [&g](const std::string& value) -> Status {
             FERRY_ASSIGN_OR_RETURN(g.partition,
                                    ParsePipelinePartition(value, "SGLANG_PP_LAYER_PARTITION"));
             return Status::Ok();
           }},
          {"dp", &g.dp, {}},
          {"attn_dp", &g.attn_dp, {}},
          WordKey("dp_attention", "yes", "no", &g.dp_attention, true),
          {"ep", &g.ep, {}},
          {"redundant", &g.redundant_experts, {}, 0},
          {"eplb_map", nullptr,
           [&g](const std::string& value) -> Status {
             if (value.empty()) return InvalidArgument("empty eplb_map= in sglang spec");
             g.eplb_map = value;
             return Status::Ok();
           }},
          {"engines", &g.engines, {}},
          {"dense_tp", &g.dense_tp, {}},
          WordKey("dp_lm_head", "yes", "no", &g.dp_lm_head, true),
          {"shared_experts", nullptr,
           [&g](const std::string& value) -> Status {
             if (value != "fused" && value != "separate") {
               return InvalidArgument("bad value '" + value +
                                      "' for shared_experts: expected fused or separate");
             }
             g.shared_fused = value == "fused" ? 1 : 0;
             return Status::Ok();
           }},
          {"a2a", nullptr,
           [&g](const std::string& value) -> Status {
             if (!IsModelledSglangA2a(value)) {
               return InvalidArgument("bad value '" + value +
                                      "' for a2a: expected none, deepep or mooncake");
             }
             g.a2a = value;
             return Status::Ok();
           }},
          {"mtp", &g.mtp, {}, 0},
          WordKey("quant", "fp8_block", "none", &g.fp8_block_weights, true),
          WordKey("expert_tensors", "stacks", "members", &spec.stack_expert_tensors, true)};
}

Status ParseNumber(const SpecKey& key, const std::string& value) {
  char* end = nullptr;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || end != value.c_str() + value.size() || parsed < key.min ||
      parsed > (1 << 20)) {
    return InvalidArgument("bad value '" + value + "' for " + key.name + ": expected " +
                           (key.min == 0 ? "a non-negative" : "a positive") + " integer");
  }
  *key.number = static_cast<int>(parsed);
  return Status::Ok();
}

// Removes the trailing "layout=STRING" key from a Megatron spec's `body` and returns STRING
// (empty when the key is absent): Megatron's layout strings may hold commas, so the key is last.
Result<std::string> TakeLayoutKey(std::string& body) {
  size_t at = body.rfind("layout=");
  while (at != std::string::npos && at > 0 && body[at - 1] != ',' && body[at - 1] != ' ') {
    at = body.rfind("layout=", at - 1);
  }
  if (at == std::string::npos) return std::string();
  const std::string layout = Trim(body.substr(at + 7));
  if (layout.empty()) return InvalidArgument("empty layout= in megatron spec '" + body + "'");
  body.erase(at);
  return layout;
}

}  // namespace

std::string FrameworkSpecKeys() {
  return "megatron:tp=N,pp=N,first=N,last=N,vstages=N,vstage_layers=N,ep=N,etp=N,dp=N,"
         "cp=N,vocab_divisible_by=N,pad_vocab=yes|no,experts=sequential|grouped|single_grouped|"
         "legacy_grouped,buffers=params|distopt,overlap_grad_reduce=yes|no,pattern=HYBRID_PATTERN,"
         "mtp=N,mtp_repeated=0|1,mcore=0.N,layout=STRING (last) or "
         "vllm:tp=N,pp=N,partition=N.N...,dp=N,ep=N,engines=N,placement=linear|round_robin,"
         "redundant=N,eplb_map=PATH,"
         "quant=none|fp8_block,scale_fmt=float32|ue8m0|ue8m0_packed,mtp=N or "
         "sglang:tp=N,pp=N,partition=N.N...,dp=N,attn_dp=N,dp_attention=yes|no,ep=N,redundant=N,"
         "eplb_map=PATH,"
         "engines=N,dense_tp=1,dp_lm_head=yes|no,shared_experts=fused|separate,"
         "a2a=none|deepep|mooncake,mtp=1,quant=none|fp8_block, any with "
         "expert_tensors=stacks|members; "
         "every key optional";
}

Result<FrameworkSpec> ParseFrameworkSpec(const std::string& text) {
  const std::string usage = " (expected " + FrameworkSpecKeys() + ")";
  const size_t colon = text.find(':');
  const std::string name = Trim(text.substr(0, colon));
  FrameworkSpec spec;
  std::vector<SpecKey> keys;
  if (name == "megatron") {
    spec.kind = FrameworkSpec::Kind::kMegatron;
    keys = MegatronKeys(spec);
  } else if (name == "vllm") {
    spec.kind = FrameworkSpec::Kind::kVllm;
    keys = VllmKeys(spec);
  } else if (name == "sglang") {
    spec.kind = FrameworkSpec::Kind::kSglang;
    keys = SglangKeys(spec);
  } else {
    return InvalidArgument("unknown framework '" + name + "' in '" + text + "'" + usage);
  }
  if (colon == std::string::npos) return spec;
  std::string body = text.substr(colon + 1);
  if (spec.kind == FrameworkSpec::Kind::kMegatron) {
    FERRY_ASSIGN_OR_RETURN(spec.megatron.layout, TakeLayoutKey(body));
  }
  std::set<std::string> seen;
  for (const std::string& item : Split(body, ',')) {
    const std::string kv = Trim(item);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string key = Trim(kv.substr(0, eq));
    auto it = std::find_if(keys.begin(), keys.end(), [&](const SpecKey& k) { return k.name == key; });
    if (it == keys.end()) {
      return InvalidArgument("unknown key '" + key + "' for " + name + " in '" + text + "'" + usage);
    }
    if (!seen.insert(key).second) {
      return InvalidArgument("key '" + key + "' given twice in '" + text + "'");
    }
    const std::string value = eq == std::string::npos ? "" : Trim(kv.substr(eq + 1));
    Status st = it->number != nullptr ? ParseNumber(*it, value) : it->word(value);
    if (!st.ok()) return st.WithContext("in '" + text + "'");
  }
  return spec;
}

Result<FrameworkSpec> ResolveFrameworkSpec(const FrameworkSpec& spec, const ModelConfig& c) {
  FrameworkSpec r = spec;
  Status st = spec.kind == FrameworkSpec::Kind::kMegatron ? ResolveMegatron(r.megatron, c)
               : spec.kind == FrameworkSpec::Kind::kVllm  ? ResolveVllm(r.vllm, c)
                                                          : ResolveSglang(r.sglang, c);
  if (!st.ok()) {
    return st.WithContext("framework " + spec.ToString() + " for model '" + c.name + "'");
  }
  return r;
}

int MtpLayers(const FrameworkSpec& s) {
  if (s.kind == FrameworkSpec::Kind::kSglang) return s.sglang.mtp;
  return s.kind == FrameworkSpec::Kind::kVllm ? s.vllm.mtp : s.megatron.MtpLayersBuilt();
}

int NumRanks(const FrameworkSpec& s) {
  if (s.kind == FrameworkSpec::Kind::kSglang) return static_cast<int>(SglangRanks(s.sglang));
  if (s.kind == FrameworkSpec::Kind::kVllm) {
    return s.vllm.tp * s.vllm.pp * s.vllm.dp * s.vllm.engines;
  }
  return s.megatron.tp * s.megatron.cp * s.megatron.dp * s.megatron.pp;
}

}  // namespace ferry::models
