// The executor's staging budget, replayed by the simulator: an op that needs staging slots not
// yet placed starts only once its rank can place them, by the executor's own policy
// (core/plan/staging_placement.h). A rank whose slots all fit the budget at once never waits; a
// rank whose plan-order layout (core/plan/staging_layout.h) does not fit it is refused, as the
// executor refuses it. Slots are freed when the last op using them finishes. Messages the
// executor carries as direct reads (core/runtime/direct_read.h) stage as it stages them
// (core/runtime/rank_run.cc, BuildDependencies): the sender's offer and the elided Pack and Unpack
// take no slots, and the receiver's read holds the slots its Unpack wrote (DirectRead::to_slots);
// a message its sender packs (DirectRead::packed) runs its Pack staged, and its offer holds the
// slot it sends from until the receiver has read it; with quantizing reads, a bf16 twin whose
// blocks the reads landing in it quantize whole takes no slot at all (ElideQuantizedTwins).
//
// Thread-safety: none; one per simulation.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/plan/staging_layout.h"
#include "core/plan/staging_placement.h"
#include "core/runtime/direct_read.h"

namespace ferry::sim {

class StagingGate {
 public:
  // The gate for `plan` under a per-rank `budget` in bytes (0: unlimited, no op ever waits), its
  // messages in `direct_reads` carried as direct reads (packed by their sender where their
  // DirectRead::packed is not empty), quantizing the blocks they hold when `quantizing_reads`
  // (executor.quantizing_reads on GPU ranks). `plan` must outlive the gate.
  static Result<StagingGate> Make(const TransferPlan& plan, int64_t budget,
                                  const std::vector<DirectRead>& direct_reads = {},
                                  bool quantizing_reads = false);

  // Op `op` is ready: true when it may start now (its slots placed); false when it waits, to be
  // returned by a later Finish.
  bool Admit(int op);
  // Op `op` finished: frees the slots no later op uses and appends to `admitted` the waiting ops
  // of its rank that may start now.
  void Finish(int op, std::vector<int>& admitted);
  // Whether `op` is waiting for staging.
  bool Waiting(int op) const;
  int64_t waits() const { return waits_; }  // Admit calls that had to wait

 private:
  struct Rank {
    bool tight = false;
    std::vector<int> ids;  // plan op ids by local index
    // The slots of local op i: slot_list[slot_begin[i], slot_begin[i + 1]), one array for the
    // rank rather than one per op.
    std::vector<int> slot_begin, slot_list;
    StagingPlacement placement;
    std::vector<char> started;            // by local index
    size_t first_unstarted = 0;           // in placement.order()
    std::set<std::pair<int, int>> waiting;  // (round, op id)
  };
  bool TryPlace(Rank& r, int local, bool blocked);
  int FirstUnstarted(Rank& r);  // the local index of the first op in plan order not started, or -1
  static std::span<const int> SlotsOf(const Rank& r, int local);  // op `local`'s slots

  const TransferPlan* plan_ = nullptr;
  std::vector<Rank> ranks_;
  std::vector<int> local_;        // by op: its index on its rank
  std::vector<int> uses_;         // by slot: ops still to use it
  int64_t waits_ = 0;
};

}  // namespace ferry::sim
