// Fault injection for `ferry run` (used by the kill harness, tools/kill_harness.py, and by the
// tests of --verify): with FERRY_INJECT_FAULT="<rank>:<kill|stop>:<mid|between>" in the
// environment, that rank sends itself SIGKILL or SIGSTOP either while its first measured refit runs
// (`mid`: from a thread, as the refit starts) or right after that refit, before the next barrier
// (`between`). Just before, it writes "ferry-fault: rank R <kind> at <ns>" (CLOCK_REALTIME) to
// stderr, from which the harness measures detection. With "<rank>:corrupt:verify" that rank flips
// one bit of its first destination fragment's first byte (in CUDA memory too) just before each
// --verify check, which must then fail naming that rank and tensor. Unset: nothing happens. The
// announcement and signal are the fault transport's (transports/fault/fault_signal.h), which
// injects the same kill or stop at a chosen transport call instead (fault.action=kill|stop); this
// file adds only the refit-moment triggers.
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
  bool mid_refit = true;  // false: between refits (kill and stop)
};

// The fault FERRY_INJECT_FAULT asks for (rank -1 when unset), or an error naming what is wrong.
Result<Fault> FaultFromEnvironment();

// Fires `fault` when it is this rank's and the moment matches: `starting` is true as a refit
// starts (a detached thread fires a `mid` fault), false once it has finished (`between`).
void MaybeInjectFault(const Fault& fault, int rank, bool starting);

// A "corrupt" fault of this rank: flips the lowest bit of the first byte of the first non-empty
// fragment of `destination` on `rank`, whose buffers are `buffers` (CUDA memory when `on_device`).
// Returns the tensor's name (empty when the fault is not this rank's or the rank holds nothing).
Result<std::string> MaybeCorrupt(const Fault& fault, int rank, const Layout& destination,
                                 const std::vector<char*>& buffers, bool on_device);

}  // namespace ferry::cli
