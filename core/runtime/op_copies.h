// OpCopies: what a run needs of one op's copy pairs, derived from the plan alone and kept with the
// plan across runs (DirectReadCache), so that a refit repeating one plan unpacks the plan's copy
// pairs once rather than every run: the staging slots they use (for the run's dependencies and
// staging) and, per copy, its geometry and where its two regions lie (buffer or slot, offset and
// size: RankRun turns them into this run's addresses).
//
// Thread-safety: none; built and read by the executor thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

// Where a region lies: its space, buffer (or staging slot) and byte offset there, and its bytes
// (Region::NumBytes, what a staging region is checked against its slot with).
struct RegionPlace {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct OpCopies {
  std::vector<int> slots;                // staging slots the copies read or write, first use first
  std::vector<CopyGeometry> geometries;  // by copy
  std::vector<RegionPlace> from, to;     // by copy
  int64_t bytes = 0;                     // destination bytes the copies write
};

// Appends `r`'s staging slot to `slots` unless `r` is no staging region or the slot is listed.
void AddStagingSlot(const Region& r, std::vector<int>& slots);

// Analyses the copy pairs of `op` (of a Quantize op, only the slots): fails (kInvalidArgument) where a pair's regions do not match
// (MakeCopyGeometry), or where a pair changes the dtype or applies an element function outside a
// Convert op. O(the op's copies).
Result<OpCopies> AnalyseOpCopies(const TransferPlan& plan, const Op& op);

}  // namespace ferry
