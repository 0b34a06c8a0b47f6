// Checks shared by the framework specs' resolution (tools/models/spec_checks.h).
#include "tools/models/spec_checks.h"

#include "core/layout/limits.h"

namespace ferry::models {

namespace {

Status NotDivisible(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  return InvalidArgument(what + " " + std::to_string(n) + " is not divisible by " + by_what + " " +
                         std::to_string(by));
}

Status CheckMamba(const ModelConfig& c, int tp) {
  if (c.family != ModelFamily::kNemotronH) return Status::Ok();
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_num_heads", c.mamba_num_heads, "tp", tp));
  FERRY_RETURN_IF_ERROR(CheckDivides("mamba_groups", c.mamba_groups, "tp", tp));
  return CheckDivides("mamba inner size", c.MambaInner(), "tp", tp);
}

}  // namespace

Status CheckDivides(const std::string& what, int64_t n, const std::string& by_what, int64_t by) {
  if (by <= 0 || n % by != 0) return NotDivisible(what, n, by_what, by);
  return Status::Ok();
}

bool HasDenseMlp(const ModelConfig& c) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerKind k = c.KindOfLayer(l);
    if (k == LayerKind::kMlp || (k == LayerKind::kDecoder && !c.IsMoeLayer(l))) return true;
  }
  return false;
}

Status CheckTensorParallel(const ModelConfig& c, int tp) {
  FERRY_RETURN_IF_ERROR(CheckDivides("num_heads", c.num_heads, "tp", tp));
  if (HasDenseMlp(c)) FERRY_RETURN_IF_ERROR(CheckDivides("intermediate", c.intermediate, "tp", tp));
  if (c.num_shared_experts > 0) {
    FERRY_RETURN_IF_ERROR(
        CheckDivides("shared expert size", c.num_shared_experts * c.moe_intermediate, "tp", tp));
  }
  return CheckMamba(c, tp);
}

Status CheckWorld(const std::string& what, int64_t world) {
  if (world > kMaxRanks) {
    return InvalidArgument(what + " = " + std::to_string(world) + " ranks, over the limit of " +
                           std::to_string(kMaxRanks) + " (kMaxRanks)");
  }
  return Status::Ok();
}

}  // namespace ferry::models
