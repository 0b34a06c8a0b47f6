// Where a run's staging slots lie in the rank's staging arena, while they are allocated: the
// executor's policy (core/runtime/rank_run.cc), which the simulator replays (tools/sim).
//
// Loose (every slot of the run fits in the arena at once): first fit over the whole arena, which
// then never fails; or, what the executor uses when the slots fit, fixed: each slot at an offset
// laid out before the run (ResetFixed), the same in every run of a plan. Tight (they do not): the arena's first `extent` bytes hold the plan-order
// layout (core/plan/staging_layout.h), in which the op first in plan order among those not yet
// started places its slots at the layout's offsets, waiting only for slots there that are dead in
// plan order but whose last op is still running; ops that run ahead of plan order take space
// first fit from the rest of the arena and never from the layout's. So the op plan order waits for
// always gets its space once what runs before it finishes: no run stalls for staging when the
// arena holds the layout (core/runtime/executor.h).
//
// Thread-safety: none; one per rank and run, used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/base/status.h"
#include "core/plan/staging_layout.h"

namespace ferry {

class StagingPlacement {
 public:
  // Forgets every slot; first fit over [0, capacity).
  void ResetLoose(int64_t capacity);
  // Forgets every slot; from now on each slot of `offsets` is placed at its offset there, which
  // never fails: for a run whose slots all fit the arena side by side. A refit runs one plan every
  // step, and this way each slot lies at the same address in every run (first fit would place
  // slots by the order completions happen to come in), so the device work built for a Pack or
  // Unpack on CUDA memory (core/runtime/gpu_read_tables.h) stays valid from run to run.
  void ResetFixed(std::unordered_map<int, int64_t> offsets);
  // Forgets every slot; `layout` over [0, layout.extent), first fit over [extent, capacity).
  // Needs capacity >= layout.extent.
  void ResetTight(StagingLayout layout, int64_t capacity);
  bool tight() const { return tight_; }
  // Tight: the run's ops in plan order.
  const std::vector<int>& order() const { return layout_.order; }

  // Places those of `slots` not placed yet, all or none: at the layout's offsets when `in_order`
  // (tight only), else first fit outside the layout. False when there is no room now.
  bool Place(std::span<const int> slots, bool in_order, const std::function<int64_t(int)>& slot_bytes);
  bool Place(const std::vector<int>& slots, bool in_order, const std::function<int64_t(int)>& slot_bytes) {
    return Place(std::span<const int>(slots), in_order, slot_bytes);
  }
  // Frees a placed slot.
  void Release(int slot);
  bool Placed(int slot) const { return offset_.count(slot) != 0; }
  // The arena offset of a placed slot, or -1.
  int64_t OffsetOf(int slot) const;
  // Bytes of the arena held by placed slots.
  int64_t in_use() const { return spare_.in_use() + in_order_bytes_ + fixed_bytes_; }

 private:
  bool PlaceInOrder(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes);
  bool PlaceFirstFit(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes);
  bool PlaceFixed(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes);
  void ForgetSlots();
  bool OverlapsHeld(int64_t begin, int64_t end) const;

  bool tight_ = false;
  bool fixed_ = false;
  std::unordered_map<int, int64_t> fixed_offset_;  // ResetFixed's offsets
  std::unordered_map<int, int64_t> fixed_held_;    // placed slot -> its bytes, when fixed_
  int64_t fixed_bytes_ = 0;
  StagingLayout layout_;
  FirstFitAllocator spare_;                   // offsets relative to layout_.extent when tight
  std::unordered_map<int, int64_t> offset_;   // placed slot -> arena offset
  std::unordered_set<int> in_order_;          // placed slots at their layout offsets
  std::map<int64_t, int64_t> held_;           // the layout's ranges held: begin -> end
  int64_t in_order_bytes_ = 0;
};

// The executor's staging decision for one rank's run, which the simulator replays: loose (no
// layout: returns nullopt) when the run's slots, `granted_total` bytes in the arena's units, all
// fit `budget` at once; else tight, with the plan-order layout `lay_out` makes, which must fit the
// budget. Fails (kInvalidArgument) naming `rank`, the layout's extent and the budget, each in
// exact bytes.
Result<std::optional<StagingLayout>> ChooseStagingLayout(
    int rank, int64_t granted_total, int64_t budget,
    const std::function<Result<StagingLayout>()>& lay_out);

}  // namespace ferry
