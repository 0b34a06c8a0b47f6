// Signals that end or stop this process on purpose, announced first: both the fault transport
// (fault.action=kill/stop) and `ferry run`'s FERRY_INJECT_FAULT (tools/cli/fault_injection.h) go
// through here, so the kill harness (tools/kill) reads one announcement format from either:
//   ferry-fault: rank <R> <kill|stop> at <ns since the epoch, CLOCK_REALTIME>
//
// Thread-safety: any thread; async-signal-safety is not needed (called from ordinary code).
#pragma once

#include <string_view>

namespace ferry::fault {

// Writes the announcement for `rank` and `kind` ("kill" or "stop") to stderr, flushes it, then
// sends this process SIGKILL (kind "kill") or SIGSTOP (any other kind). Returns only after a stop
// is continued.
void AnnounceAndSignal(int rank, std::string_view kind);

}  // namespace ferry::fault
