// Recovery inside `ferry run --recover`: after a refit fails because the communicator aborted (a
// rank died, stopped, or failed), every live rank recreates the communicator at the next epoch —
// the local launcher has meanwhile started a replacement for a rank whose process died
// (FERRY_REPLACEMENT=1, local_launch.h), which joins that epoch — and all ranks, the replacement
// included, agree through the store on the refit to resume at: the earliest one a survivor did
// not finish, or that rank 0 did not report when rank 0 reports each refit (--verify: a rank 0
// that died after every rank finished a refit but before it reported the refit's verification
// leaves that refit to be run and reported again). Rank 0 — a survivor, or rank 0's own
// replacement — reports, through `say`, the fault (as the faulty rank recorded it before firing,
// RecordFault), which survivor detected it after how many milliseconds and with what error, and
// when the replacement had joined; the summary line of each recovery is kept in the store, so
// that it outlives any one rank's process.
// Recoveries repeat: each failure moves every rank one epoch on.
//
// Blocking: every function waits on the store or the communicator, bounded by the deadlines
// given. Threading: the rank's main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/session.h"
#include "tools/cli/fault_injection.h"

namespace ferry::cli {

// Where a rank is in a run: variant index and iteration (warm-ups first, from 0).
struct RunPoint {
  int variant = 0;
  int iteration = 0;
  bool operator<(const RunPoint& o) const {
    return variant != o.variant ? variant < o.variant : iteration < o.iteration;
  }
  bool operator==(const RunPoint& o) const = default;
};

// Where a recovered run goes on: the refit to resume at, and whether that refit is resumed with
// Refit::RunRest (only what its failed attempt left undelivered) rather than run whole. It is
// when every survivor failed in that very refit after starting its Run (so its destinations hold
// that attempt's writes, which Refit::CompleteDestinationTensors accounts for) and the run allows
// it (RecoveryContext::rest_allowed); a replacement's destinations are new and count as holding
// nothing complete.
struct Resumption {
  RunPoint point;
  bool rest = false;
};

// What the ranks share while recovering.
struct RecoveryContext {
  Session& session;
  int rank = 0;
  int size = 1;
  double connect_seconds = 60;  // deadline.connect: how long Recreate waits for the replacement
  double store_seconds = 60;    // deadline.store
  // Names a point for people ("reshard refit 3/5").
  std::function<std::string(const RunPoint&)> describe;
  // Rank 0's progress lines.
  std::function<void(const std::string&)> say;
  // Refits of a variant from this iteration on are reported one by one by rank 0 (MarkReported),
  // and a recovery resumes no later than the first one not reported; -1: none are.
  int reported_from = -1;
  // Whether a refit may be resumed with Refit::RunRest (false for block-scaled destinations,
  // which RunRest refuses).
  bool rest_allowed = true;
};

// Rank 0, once it has reported refit `point` (its verification): recorded in the store, so that a
// recovery after rank 0's death knows the report was made.
Status MarkReported(const RecoveryContext& c, const RunPoint& point);

// The summary lines of every recovery of the run so far, in order (one per recovery).
Result<std::vector<std::string>> RecoveryLog(const RecoveryContext& c);

// The faulty rank, just before `fault` fires at `point`: writes when and what to the store, so
// that rank 0 can time every survivor's detection against it, and that the fault (by its index)
// has fired, so that the rank's replacement does not fire it again.
Status RecordFault(const RecoveryContext& c, const Fault& fault, const RunPoint& point);

// A replacement process: `faults` less those of its rank that a predecessor fired (and less its
// rank's "corrupt" faults, which were its predecessor's).
Result<std::vector<Fault>> FaultsLeft(const RecoveryContext& c, const std::vector<Fault>& faults);

// A survivor whose refit at `failed_at` failed with `failure`: recreates the communicator (fails
// when it was not aborted: nothing to recover from), agrees with every rank on where to resume
// and whether by RunRest, and returns it. `ran_failed_refit`: this rank's last Run was that
// refit's (it had started the Run when the failure came). Rank 0 reports.
Result<Resumption> RecoverAfterFailure(const RecoveryContext& c, const RunPoint& failed_at, bool ran_failed_refit,
                                       const Status& failure);

// A replacement process, once joined: agrees with the survivors on where to resume; a
// replacement rank 0 reports the recovery, as a surviving rank 0 would have.
Result<Resumption> JoinAsReplacement(const RecoveryContext& c);

}  // namespace ferry::cli
