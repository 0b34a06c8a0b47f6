// Framework specs: parsing "megatron:..." / "vllm:..." text, the canonical text back, resolving a
// spec against a model (defaults and every divisibility the layouts rely on) and its rank count.
#include "tools/models/framework_spec.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "core/base/checked_math.h"
#include "core/base/strings.h"
#include "core/layout/limits.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

Status NotDivisible(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  return InvalidArgument(what + " " + std::to_string(n) + " is not divisible by " + by_what + " " +
                         std::to_string(by));
}

Status CheckDivides(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  if (by <= 0 || n % by != 0) return NotDivisible(what, n, by_what, by);
  return Status::Ok();
}

Status CheckMamba(const ModelConfig& c, int tp) {
  if (c.family != ModelFamily::kNemotronH) return Status::Ok();
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_num_heads", c.mamba_num_heads, "tp", tp));
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_groups", c.mamba_groups, "tp", tp));
  return CheckDivides("mamba inner size", c.MambaInner(), "tp", tp);
}

// Divisibility shared by both frameworks' tensor-parallel attention and dense MLPs.
Status CheckTensorParallel(const ModelConfig& c, int tp) {
  FERRY_RETURN_IF_ERROR(CheckDivides("num_heads", c.num_heads, "tp", tp));
  bool has_dense_mlp = false;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerKind k = c.KindOfLayer(l);
    if (k == LayerKind::kMlp || (k == LayerKind::kDecoder && !c.IsMoeLayer(l))) has_dense_mlp = true;
  }
  if (has_dense_mlp) FERRY_RETURN_IF_ERROR(CheckDivides("intermediate", c.intermediate, "tp", tp));
  if (c.num_shared_experts > 0) {
    FERRY_RETURN_IF_ERROR(CheckDivides("shared expert size", c.num_shared_experts * c.moe_intermediate,
                                       "tp", tp));
  }
  return CheckMamba(c, tp);
}

// Megatron: etp defaults to tp and dp to the smallest value whose stage fits ep*etp; pp must not
// exceed the layers, and heads, query groups, experts and the expert FFN must divide as the layout
// needs.
// A framework's ranks (the product of its parallel sizes) within kMaxRanks, checked in int64
// before anything multiplies them as int or builds a layout of that many ranks.
Status CheckWorld(const std::string& what, int64_t world) {
  if (world > kMaxRanks) {
    return InvalidArgument(what + " = " + std::to_string(world) + " ranks, over the limit of " +
                           std::to_string(kMaxRanks) + " (kMaxRanks)");
  }
  return Status::Ok();
}

Status ResolveMegatron(MegatronParallel& m, const ModelConfig& c) {
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
  if (m.pp > c.num_layers) {
    return InvalidArgument("pp " + Num(m.pp) + " exceeds the " + Num(c.num_layers) + " layers");
  }
  Status st = CheckTensorParallel(c, m.tp);
  if (st.ok() && !c.IsMla()) {
    st = CheckDivides("num_kv_heads (query groups)", c.num_kv_heads, "tp", m.tp);
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

// vLLM: KV heads and tp divide one another (KV heads are replicated when tp exceeds them); the
// engine's tp*dp ranks split into ep expert owners, each expert's FFN over the rest.
Status ResolveVllm(const VllmParallel& v, const ModelConfig& c) {
  FERRY_RETURN_IF_ERROR(CheckWorld("vllm tp*dp*engines", SatMul(SatMul(v.tp, v.dp), v.engines)));
  FERRY_RETURN_IF_ERROR(CheckWorld("vllm ep", v.ep));
  if (!c.IsMoe() && v.ep != 1) return InvalidArgument("the model has no experts; ep must be 1");
  Status st = CheckTensorParallel(c, v.tp);
  if (st.ok() && !c.IsMla() && c.num_kv_heads % v.tp != 0 && v.tp % c.num_kv_heads != 0) {
    st = InvalidArgument("num_kv_heads " + Num(c.num_kv_heads) + " and tp " + Num(v.tp) +
                         " do not divide one another");
  }
  if (st.ok() && c.IsMoe()) {
    const int64_t world = static_cast<int64_t>(v.tp) * v.dp;
    st = CheckDivides("tp*dp", world, "ep", v.ep);
    if (st.ok()) st = CheckDivides("num_experts", c.num_experts, "ep", v.ep);
    if (st.ok()) st = CheckDivides("moe_intermediate", c.moe_intermediate, "tp*dp/ep", world / v.ep);
  }
  return st;
}

}  // namespace

std::string FrameworkSpec::ToString() const {
  const std::string naming = stack_expert_tensors ? "" : ",expert_tensors=members";
  if (kind == Kind::kVllm) {
    return "vllm:tp=" + Num(vllm.tp) + ",dp=" + Num(vllm.dp) + ",ep=" + Num(vllm.ep) +
           (vllm.engines > 1 ? ",engines=" + Num(vllm.engines) : "") + naming;
  }
  const MegatronParallel& m = megatron;
  std::string s = "megatron:tp=" + Num(m.tp) + ",pp=" + Num(m.pp) + ",ep=" + Num(m.ep);
  if (m.etp > 0) s += ",etp=" + Num(m.etp);
  if (m.dp > 0) s += ",dp=" + Num(m.dp);
  s += ",cp=" + Num(m.cp);
  return (m.separate_expert_buffers ? s + ",experts=separate" : s) + naming;
}

Result<FrameworkSpec> ParseFrameworkSpec(const std::string& text) {
  const std::string usage =
      " (expected megatron:tp=N,pp=N,ep=N,etp=N,dp=N,cp=N,experts=stacked|separate or "
      "vllm:tp=N,dp=N,ep=N,engines=N, either with expert_tensors=stacks|members; every key "
      "optional)";
  const size_t colon = text.find(':');
  const std::string name = Trim(text.substr(0, colon));
  FrameworkSpec spec;
  std::vector<std::pair<std::string, int*>> keys;
  if (name == "megatron") {
    spec.kind = FrameworkSpec::Kind::kMegatron;
    MegatronParallel& m = spec.megatron;
    keys = {{"tp", &m.tp}, {"pp", &m.pp}, {"ep", &m.ep}, {"etp", &m.etp},
            {"dp", &m.dp}, {"cp", &m.cp}, {"experts", nullptr}, {"expert_tensors", nullptr}};
  } else if (name == "vllm") {
    spec.kind = FrameworkSpec::Kind::kVllm;
    VllmParallel& v = spec.vllm;
    keys = {{"tp", &v.tp}, {"dp", &v.dp}, {"ep", &v.ep}, {"engines", &v.engines},
            {"expert_tensors", nullptr}};
  } else {
    return InvalidArgument("unknown framework '" + name + "' in '" + text + "'" + usage);
  }
  if (colon == std::string::npos) return spec;
  std::set<std::string> seen;
  for (const std::string& item : Split(text.substr(colon + 1), ',')) {
    const std::string kv = Trim(item);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string key = Trim(kv.substr(0, eq));
    auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; });
    if (it == keys.end()) {
      return InvalidArgument("unknown key '" + key + "' for " + name + " in '" + text + "'" + usage);
    }
    if (!seen.insert(key).second) {
      return InvalidArgument("key '" + key + "' given twice in '" + text + "'");
    }
    const std::string value = eq == std::string::npos ? "" : Trim(kv.substr(eq + 1));
    if (key == "experts") {
      if (value != "stacked" && value != "separate") {
        return InvalidArgument("bad value '" + value + "' for experts in '" + text +
                               "': expected stacked or separate");
      }
      spec.megatron.separate_expert_buffers = value == "separate";
      continue;
    }
    if (key == "expert_tensors") {
      if (value != "stacks" && value != "members") {
        return InvalidArgument("bad value '" + value + "' for expert_tensors in '" + text +
                               "': expected stacks or members");
      }
      spec.stack_expert_tensors = value == "stacks";
      continue;
    }
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || end != value.c_str() + value.size() || parsed < 1 || parsed > (1 << 20)) {
      return InvalidArgument("bad value '" + value + "' for " + key + " in '" + text +
                             "': expected a positive integer");
    }
    *it->second = static_cast<int>(parsed);
  }
  return spec;
}

Result<FrameworkSpec> ResolveFrameworkSpec(const FrameworkSpec& spec, const ModelConfig& c) {
  FrameworkSpec r = spec;
  Status st = spec.kind == FrameworkSpec::Kind::kMegatron ? ResolveMegatron(r.megatron, c)
                                                          : ResolveVllm(r.vllm, c);
  if (!st.ok()) {
    return st.WithContext("framework " + spec.ToString() + " for model '" + c.name + "'");
  }
  return r;
}

int NumRanks(const FrameworkSpec& s) {
  if (s.kind == FrameworkSpec::Kind::kVllm) return s.vllm.tp * s.vllm.dp * s.vllm.engines;
  return s.megatron.tp * s.megatron.cp * s.megatron.dp * s.megatron.pp;
}

}  // namespace ferry::models
