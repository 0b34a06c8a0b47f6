// Where a rank's staging slots lie in its staging arena: the first-fit allocator the executor
// places slots with at run time (in 256-byte units), and the plan-order layout, from which the
// executor's staging contract follows.
//
// The plan-order layout runs a rank's ops one at a time, in plan order (lowest (round, index)
// first among the ops whose dependencies are done): a slot lives from the first op that uses it to
// the last, and two slots live at once never overlap. Slots are placed first fit as plan order
// takes and frees them; where that leaves holes (its extent exceeds the most bytes ever live at
// once) and the rank has at most 20,000 slots, they are placed instead largest first, each at the
// lowest offset clear of those whose lives overlap its own (greedy by size). Its extent is the staging that rank needs: the
// executor refuses a smaller executor.staging_budget before running anything, and with at least
// that much it never waits for space that only a waiting op could free (core/runtime/executor.h
// says how it uses the layout).
//
// Thread-safety: none; values and functions without shared state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"

namespace ferry {

// First-fit allocator over [0, capacity), in 256-byte units. Hands out offsets only.
class FirstFitAllocator {
 public:
  // Forgets every allocation and manages [0, capacity).
  void Reset(int64_t capacity);
  // Returns the offset of `bytes` free bytes, or -1 when no free block is large enough.
  int64_t Allocate(int64_t bytes);
  // What an allocation of `bytes` takes: whole 256-byte units, at least one.
  static int64_t Granted(int64_t bytes) { return std::max<int64_t>((bytes + 255) & ~int64_t{255}, 256); }
  // Frees the allocation at `offset` (an offset Allocate returned), merging free neighbours.
  void Free(int64_t offset);
  int64_t in_use() const { return in_use_; }

 private:
  std::map<int64_t, int64_t> free_;            // offset -> bytes
  std::unordered_map<int64_t, int64_t> used_;  // offset -> bytes
  int64_t in_use_ = 0;
  // No free block is larger: Allocate refuses a larger request without walking free_. Exact after
  // a walk that found no fit, raised by Free's merged blocks; allocations only shrink blocks.
  int64_t largest_free_bound_ = 0;
};

struct StagingLayout {
  std::vector<int> order;                   // the rank's ops (local indices) in plan order
  std::unordered_map<int, int64_t> offset;  // slot -> its offset in the arena
  int64_t extent = 0;                       // bytes of arena the layout reaches
};

// One rank's ops as the plan-order layout reads them, every message staged: plan op ids by local
// index, and by local index i its round, the local ops that wait for it (ascending) and the
// distinct slots it uses, these two as flat arrays with offsets (dependents of i:
// dependents[dependents_begin[i], dependents_begin[i + 1]), and the same for slots).
struct RankStagingOps {
  std::vector<int> ids;
  std::vector<int> round;
  std::vector<int> dependents_begin, dependents;
  std::vector<int> slots_begin, slots;

  std::span<const int> DependentsOf(int i) const { return Range(dependents_begin, dependents, i); }
  std::span<const int> SlotsOf(int i) const { return Range(slots_begin, slots, i); }

 private:
  static std::span<const int> Range(const std::vector<int>& begin, const std::vector<int>& all, int i) {
    const int first = begin[static_cast<size_t>(i)];
    return {all.data() + first, static_cast<size_t>(begin[static_cast<size_t>(i) + 1] - first)};
  }
};

// The plan-order layout of one rank's ops (`ids` unused); `slot_bytes(s)` is slot s's size. Fails
// when the dependencies form a cycle.
Result<StagingLayout> LayOutStagingInPlanOrder(const RankStagingOps& ops,
                                               const std::function<int64_t(int)>& slot_bytes);

// The same, with the rank's ops by local index i as `round[i]`, `dependents[i]` (the local ops
// that wait for op i) and `slots[i]` (the distinct slots op i uses).
Result<StagingLayout> LayOutStagingInPlanOrder(const std::vector<int>& round,
                                               const std::vector<std::vector<int>>& dependents,
                                               const std::vector<std::vector<int>>& slots,
                                               const std::function<int64_t(int)>& slot_bytes);

// LayOutStagingInPlanOrder that remembers its last inputs and layout, and returns that layout
// again for equal inputs (compared in full): an executor runs one plan refit after refit.
// Thread-safety: none.
class StagingLayoutCache {
 public:
  Result<StagingLayout> LayOut(const std::vector<int>& round, const std::vector<std::vector<int>>& dependents,
                               const std::vector<std::vector<int>>& slots,
                               const std::function<int64_t(int)>& slot_bytes);

 private:
  bool valid_ = false;
  std::vector<int> round_;
  std::vector<std::vector<int>> dependents_, slots_;
  std::vector<int64_t> bytes_;  // each slot reference's size, in the order of slots_
  StagingLayout layout_;
};


// Every rank's ops (index = rank), or an error naming an op that depends on another rank's op or
// uses a slot the plan lacks.
Result<std::vector<RankStagingOps>> StagingOpsByRank(const TransferPlan& plan);

// The most staging one rank of `plan` needs in plan order when every message is staged (direct
// reads off) and no CUDA data bounces through host memory: the smallest executor.staging_budget
// that runs the plan so.
Result<int64_t> PlanOrderStagingBytes(const TransferPlan& plan);

}  // namespace ferry
