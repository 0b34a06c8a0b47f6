// FaultSpec: the fault.* option table, its checks, and which calls a spec hits.
#include "transports/fault/fault_spec.h"

#include <string>
#include <utility>

#include "core/base/option_table.h"

namespace ferry::fault {
namespace {

const OptionTable<FaultSpec>& Table() {
  static const OptionTable<FaultSpec> table = [] {
    OptionTable<FaultSpec> t;
    t.Int("fault.rank", &FaultSpec::rank, "the rank that injects the fault; -1: every rank", -1)
        .Int("fault.peer", &FaultSpec::peer,
             "connect/send/recv faults hit only calls for this peer; -1: any peer", -1)
        .Choice("fault.op", &FaultSpec::op,
                {{"connect", FaultOp::kConnect}, {"send", FaultOp::kSend}, {"recv", FaultOp::kRecv},
                 {"poll", FaultOp::kPoll}, {"register", FaultOp::kRegister}, {"abort", FaultOp::kAbort}},
                "the transport call the fault hits")
        .Choice("fault.action", &FaultSpec::action,
                {{"none", FaultAction::kNone}, {"delay", FaultAction::kDelay}, {"drop", FaultAction::kDrop},
                 {"error", FaultAction::kError}, {"hang", FaultAction::kHang}, {"kill", FaultAction::kKill},
                 {"stop", FaultAction::kStop}},
                "what happens to a hit call: delay it by fault.delay, drop it (send/recv/poll), fail it, "
                "hang it until abort (on op abort: forever), or SIGKILL/SIGSTOP the process")
        .Int("fault.after", &FaultSpec::after, "calls of fault.op that pass unharmed before the first hit")
        .Int("fault.count", &FaultSpec::count, "consecutive calls hit from the first; 0: every later call")
        .Seconds("fault.delay", &FaultSpec::delay_seconds, "how long fault.action=delay holds a call");
    return t;
  }();
  return table;
}

const OptionSpec kInnerOption{"fault.inner", "tcp",
                              "the registered transport the fault transport wraps (any but fault)"};

bool TakesPeer(FaultOp op) {
  return op == FaultOp::kConnect || op == FaultOp::kSend || op == FaultOp::kRecv;
}

// Refuses an action that cannot happen to `op`, naming both options.
Status CheckCombination(const FaultSpec& spec) {
  const std::string pair = "fault.action=" + std::string(FaultActionName(spec.action)) +
                           " with fault.op=" + std::string(FaultOpName(spec.op));
  const bool drop_ok = spec.op == FaultOp::kSend || spec.op == FaultOp::kRecv || spec.op == FaultOp::kPoll;
  if (spec.action == FaultAction::kDrop && !drop_ok) {
    return InvalidArgument(pair + ": only send, recv and poll can be dropped");
  }
  if (spec.action == FaultAction::kError && spec.op == FaultOp::kAbort) {
    return InvalidArgument(pair + ": Abort returns nothing to fail; use hang or delay");
  }
  if (spec.peer >= 0 && !TakesPeer(spec.op)) {
    return InvalidArgument("fault.peer=" + std::to_string(spec.peer) + " with fault.op=" +
                           std::string(FaultOpName(spec.op)) + ": only connect, send and recv have a peer");
  }
  return Status::Ok();
}

// fault.rank and fault.peer name ranks of the communicator (or -1): a fault on a rank past
// `size` would never fire, and the run would pass as if the fault had been survived.
Status CheckRanks(const FaultSpec& spec, int size) {
  for (const auto& [name, value] : {std::pair<const char*, int>{"fault.rank", spec.rank},
                                    {"fault.peer", spec.peer}}) {
    if (value >= size) {
      return InvalidArgument(std::string(name) + "=" + std::to_string(value) + " is not a rank of this " +
                             std::to_string(size) + "-rank communicator: give -1 or a rank in [0, " +
                             std::to_string(size) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view FaultOpName(FaultOp op) {
  switch (op) {
    case FaultOp::kConnect: return "connect";
    case FaultOp::kSend: return "send";
    case FaultOp::kRecv: return "recv";
    case FaultOp::kPoll: return "poll";
    case FaultOp::kRegister: return "register";
    case FaultOp::kAbort: return "abort";
  }
  return "?";
}

std::string_view FaultActionName(FaultAction action) {
  switch (action) {
    case FaultAction::kNone: return "none";
    case FaultAction::kDelay: return "delay";
    case FaultAction::kDrop: return "drop";
    case FaultAction::kError: return "error";
    case FaultAction::kHang: return "hang";
    case FaultAction::kKill: return "kill";
    case FaultAction::kStop: return "stop";
  }
  return "?";
}

bool FaultSpec::Hits(FaultOp call_op, int call_rank, int64_t call) const {
  if (action == FaultAction::kNone || call_op != op) return false;
  if (rank >= 0 && call_rank != rank) return false;
  return call >= after && (count == 0 || call < static_cast<int64_t>(after) + count);
}

std::string FaultSpec::Describe() const {
  return "fault.action=" + std::string(FaultActionName(action)) + " on " +
         (rank < 0 ? std::string("every rank") : "rank " + std::to_string(rank)) + ", op " +
         std::string(FaultOpName(op)) + (peer >= 0 ? " to/from peer " + std::to_string(peer) : "") +
         ", after " + std::to_string(after) + " calls";
}

std::vector<OptionSpec> FaultOptions() {
  std::vector<OptionSpec> options{kInnerOption};
  for (OptionSpec& spec : Table().Specs()) options.push_back(std::move(spec));
  return options;
}

Result<FaultSpec> FaultSpecFromContext(const TransportContext& context) {
  FaultSpec spec;
  if (context.config != nullptr) {
    FERRY_ASSIGN_OR_RETURN(spec, Table().Read(*context.config));
  }
  spec.inner = context.Option(kInnerOption.name, kInnerOption.default_value);
  if (spec.inner.empty() || spec.inner == "fault") {
    return InvalidArgument("fault.inner='" + spec.inner + "': name a registered transport other than fault");
  }
  FERRY_RETURN_IF_ERROR(CheckCombination(spec));
  FERRY_RETURN_IF_ERROR(CheckRanks(spec, context.size));
  return spec;
}

}  // namespace ferry::fault
