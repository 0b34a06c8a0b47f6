// AnalyseOpCopies (core/runtime/op_copies.h).
#include "core/runtime/op_copies.h"

#include <algorithm>

namespace ferry {
namespace {

RegionPlace PlaceOf(const Region& r) {
  return {r.space, r.buffer, r.offset, r.NumBytes()};
}

}  // namespace

void AddStagingSlot(const Region& r, std::vector<int>& slots) {
  if (r.space == Space::kStaging && std::find(slots.begin(), slots.end(), r.buffer) == slots.end()) {
    slots.push_back(r.buffer);
  }
}

Result<OpCopies> AnalyseOpCopies(const TransferPlan& plan, const Op& op) {
  OpCopies out;
  const int64_t n = op.NumCopies();
  out.geometries.reserve(static_cast<size_t>(n));
  out.from.reserve(static_cast<size_t>(n));
  out.to.reserve(static_cast<size_t>(n));
  for (const CopyPair& pair : plan.Copies(op)) {
    if (op.kind == OpKind::kQuantize) {  // its copies are a block quantizer's job, not geometries
      AddStagingSlot(pair.from, out.slots);
      AddStagingSlot(pair.to, out.slots);
      continue;
    }
    if (op.kind != OpKind::kConvert && (pair.from.dtype != pair.to.dtype || pair.fn != ElementFn::kNone)) {
      return InvalidArgument("dtype changes and element functions only in convert ops");
    }
    FERRY_ASSIGN_OR_RETURN(CopyGeometry g, MakeCopyGeometry(pair.from, pair.to, pair.fn));
    out.bytes += g.bytes();
    out.geometries.push_back(g);
    out.from.push_back(PlaceOf(pair.from));
    out.to.push_back(PlaceOf(pair.to));
    AddStagingSlot(pair.from, out.slots);
    AddStagingSlot(pair.to, out.slots);
  }
  return out;
}

}  // namespace ferry
