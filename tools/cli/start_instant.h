// The common instant at which every rank of `ferry run` starts a refit: rank 0 picks it a margin
// after the barrier before the refit, the ranks learn it through the store, and each sleeps until
// it, so that a refit is timed from one instant and not from when each process happened to leave
// the barrier (on a loaded host 8 processes leave one tens of milliseconds apart).
//
// The clock is CLOCK_REALTIME (std::chrono::system_clock, which the samples of run_report.h are
// taken on): the kernel keeps one for every process of a host (time namespaces offset only the
// monotonic and boot clocks), and it is the only clock that ranks on different hosts can share.
// Ranks of `ferry run` may be on several hosts (under torchrun, mpirun or srun), so the instant is
// used there too, and the hosts need synchronised clocks (NTP, PTP), as the report already does to
// compare one rank's start with another's end. A rank whose clock reads the instant further ahead
// than any margin rank 0 picks (its clock is behind rank 0's) sleeps no longer than that cap,
// so a skewed clock costs at most the cap and shows as a late or early start in the report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store.h"

namespace ferry::cli {

// Nanoseconds since the epoch on CLOCK_REALTIME.
int64_t WallNanos();

// Rank 0's margin between picking the instant and the instant itself. It must cover the time
// from the pick until the last rank has learned the instant (a barrier's release, a store round
// trip and the process being scheduled), which ranges from tens of microseconds on an idle host
// to tens of milliseconds on a loaded one, so it follows what the previous refit showed: twice
// the time the last rank took to learn it (one release may well be twice as slow as the one
// before), at least kFloorNs (a release is never free), at most kCapNs (the wall time each refit
// may add; a margin too short only makes ranks start late, which the report counts). The first
// refit, with nothing observed yet, gets kInitialNs, above the 20-37 ms releases of 8 processes on
// a loaded 2-core host. Not thread-safe.
class StartMargin {
 public:
  static constexpr int64_t kFloorNs = 1'000'000;
  static constexpr int64_t kCapNs = 500'000'000;
  static constexpr int64_t kInitialNs = 50'000'000;

  int64_t nanos() const { return nanos_; }
  // The refit just done: its last rank learned the instant `slack_ns` before it (negative: after).
  void Observe(int64_t slack_ns);

 private:
  int64_t nanos_ = kInitialNs;
};

// One refit's agreed start, as this rank learned it.
struct StartInstant {
  int64_t instant_ns = 0;  // when every rank starts (WallNanos)
  int64_t known_ns = 0;    // when this rank learned it
};

// Every rank calls it with the same `key` and its rank: `barrier(name)` (every rank, with the same
// names; Communicator::Barrier in `ferry run`, which ends when the communicator aborts) on
// `key`/start, then rank 0 picks the instant `margin_ns` (rank 0's, StartMargin) from now and
// publishes it, and after a second barrier, `key`/instant, every other rank reads it; the store's
// read cannot wait, the value was set before rank 0 reached that barrier. Returns when this rank
// knows the instant; it does not sleep.
Result<StartInstant> AgreeOnStart(Store& store, const std::string& key, int rank, int64_t margin_ns,
                                  Deadline deadline, const std::function<Status(const std::string&)>& barrier);

// When a rank that learned `instant_ns` at `now_ns` wakes: at the instant, or at most
// StartMargin::kCapNs from now when its clock reads the instant further away than any margin.
int64_t WakeAt(int64_t instant_ns, int64_t now_ns);

// Sleeps until WakeAt(instant_ns, WallNanos()) on CLOCK_REALTIME (an absolute deadline, so that
// time spent being scheduled before the call does not lengthen the sleep); returns at once when it
// has passed.
void SleepUntil(int64_t instant_ns);

}  // namespace ferry::cli
