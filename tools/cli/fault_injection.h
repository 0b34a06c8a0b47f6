// Fault injection for `ferry run` (used by the kill harness, tools/kill, by the tests of --verify
// and by `ferry run --inject-fault ... --recover`): with FERRY_INJECT_FAULT (or --inject-fault)
// "<rank>:<kill|stop>:<moment>", that rank sends itself SIGKILL or SIGSTOP either while a measured
// refit runs (`mid`, `mid=N`: from a thread, as the N-th measured refit starts), as its transfers
// end on this rank (`verify=N`: before its verification and, on rank 0, before the report of
// it), or right after it, before the next barrier (`between`, `after=N`: once the N-th measured
// refit has finished and, with per-refit verification, been verified). N counts measured refits
// from 1; `mid` and `between` mean N = 1. Just before, it writes "ferry-fault: rank R <kind> at <ns>"
// (CLOCK_REALTIME) to stderr, from which the harness measures detection. With
// "<rank>:corrupt:verify" that rank flips one bit of its first destination fragment's first byte
// (in CUDA memory too) just before each --verify check, which must then fail naming that rank and
// tensor. Several faults are separated by commas ("1:kill:after=1,1:kill:after=3", "0:kill:mid=2,
// 2:kill:after=3"), at most kMaxFaults: under --recover each kill lands on whichever process then
// holds its rank (a replacement skips the faults its predecessors fired, run_recovery.h).
// Unset: nothing happens. The announcement and signal are the fault transport's
// (transports/fault/fault_signal.h), which injects the same kill or stop at a chosen transport
// call instead (fault.action=kill|stop); this file adds only the refit-moment triggers.
//
// Threading: Parse once from main's thread; the injection points may run on any thread.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::cli {

struct Fault {
  int rank = -1;          // -1: no fault
  int signal = 0;         // SIGKILL or SIGSTOP; 0 for "corrupt"
  std::string kind;       // "kill", "stop" or "corrupt"
  bool mid_refit = true;  // false: after the refit (kill and stop)
  bool at_verify = false;  // verify=N: as the refit's transfers end (mid_refit is false)
  int refit = 1;          // the measured refit (from 1) it goes off in or after
  int index = 0;          // its place in the spec's list (ParseFaults), from 0
};

// Faults one spec may list.
inline constexpr int kMaxFaults = 16;

// The fault `spec` asks for (rank -1 when empty), or an error naming what is wrong; `source`
// names where the spec came from in that error (FERRY_INJECT_FAULT, --inject-fault).
Result<Fault> ParseFault(const std::string& spec, const std::string& source);

// The faults of a comma-separated `spec`, in its order (none when empty); an error names the
// fault that is wrong.
Result<std::vector<Fault>> ParseFaults(const std::string& spec, const std::string& source);

// The faults FERRY_INJECT_FAULT asks for (none when unset), or an error naming what is wrong.
Result<std::vector<Fault>> FaultsFromEnvironment();

// Whether `fault` fires on `rank` at this moment: `starting` is true as measured refit `refit`
// (from 1) starts, false once it has finished.
bool FaultDue(const Fault& fault, int rank, bool starting, int refit);

// Whether `fault` is a verify=N fault of `rank` with N = `refit` (see MaybeInjectAtVerify).
bool FaultDueAtVerify(const Fault& fault, int rank, int refit);

// Fires `fault` now when FaultDueAtVerify: measured refit `refit`'s transfers have just ended on
// this rank, and its verification has not begun.
void MaybeInjectAtVerify(const Fault& fault, int rank, int refit);

// Fires `fault` when FaultDue (a detached thread fires a `mid` fault, so that it lands while the
// refit runs). Called as a `mid` fault's refit finishes, it fires that fault now if its thread
// has not yet run: on a loaded machine the thread may be scheduled late, and a kill landing after
// the last refit would leave no refit for the survivors to notice it in.
void MaybeInjectFault(const Fault& fault, int rank, bool starting, int refit);

// A "corrupt" fault of this rank: flips the lowest bit of the first byte of the first non-empty
// fragment of `destination` on `rank`, whose buffers are `buffers` (CUDA memory when `on_device`).
// Returns the tensor's name (empty when the fault is not this rank's or the rank holds nothing).
Result<std::string> MaybeCorrupt(const Fault& fault, int rank, const Layout& destination,
                                 const std::vector<char*>& buffers, bool on_device);

}  // namespace ferry::cli
