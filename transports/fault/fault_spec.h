// FaultSpec: which fault the "fault" transport injects, read from its options (fault.*): on which
// rank, into which operation, after how many calls, how many times, and what happens then. Pure
// data plus the option table; no transport calls.
//
// Thread-safety: a FaultSpec is immutable after FaultSpecFromContext; any thread may read it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/config.h"
#include "core/base/status.h"
#include "core/runtime/transport.h"

namespace ferry::fault {

// The transport calls a fault can hit. kSend/kRecv are PostSend/PostRecv, kRegister is
// RegisterMemory.
enum class FaultOp { kConnect, kSend, kRecv, kPoll, kRegister, kAbort };
std::string_view FaultOpName(FaultOp op);

enum class FaultAction {
  kNone,   // forward every call unchanged
  kDelay,  // wait fault.delay (cut short by Abort), then forward
  kDrop,   // send: report success but never send; recv: never complete (until Abort);
           // poll: discard the completions this call returned
  kError,  // fail the call with kUnavailable naming the rank, op and call number
  kHang,   // block until Abort is called; on op abort: never return (a library abort that hangs)
  kKill,   // SIGKILL this process (announced on stderr, see fault_signal.h)
  kStop,   // SIGSTOP this process (announced likewise)
};
std::string_view FaultActionName(FaultAction action);

struct FaultSpec {
  std::string inner = "tcp";  // the wrapped transport's registry name
  int rank = -1;              // the rank that injects; -1: every rank
  int peer = -1;              // connect/send/recv only: calls for this peer only; -1: any peer
  FaultOp op = FaultOp::kSend;
  FaultAction action = FaultAction::kNone;
  int after = 0;              // calls of `op` (matching `peer`) that pass unharmed before the first hit
  int count = 1;              // consecutive calls hit from then on; 0: every later call
  double delay_seconds = 1;   // kDelay's wait

  // Whether call number `call` (0-based, counted per op) of `op` on `rank` is hit.
  bool Hits(FaultOp call_op, int call_rank, int64_t call) const;
  // "fault.action=error on rank 1, op send, after 2 calls" for error messages and logs.
  std::string Describe() const;
};

// The fault.* options with their defaults and help (the transport registration's table).
std::vector<OptionSpec> FaultOptions();

// Reads and checks the fault.* options of `context` (absent options take their defaults).
// Refuses combinations that mean nothing (drop on connect, error on abort, inner "fault"), naming
// the option at fault.
Result<FaultSpec> FaultSpecFromContext(const TransportContext& context);

}  // namespace ferry::fault
