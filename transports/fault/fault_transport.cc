// FaultTransport: forwarding to the inner transport, and each fault action at its call.
#include "transports/fault/fault_transport.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "transports/fault/fault_signal.h"

namespace ferry::fault {
namespace {

constexpr auto kSlice = std::chrono::milliseconds(20);

// Blocks this thread for good: the library abort that never returns. It touches no object, so
// the process can still exit around it (a condition variable with a waiter would block exit in
// its destructor).
[[noreturn]] void HangForever() {
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

FaultTransport::FaultTransport(FaultSpec spec, int rank, std::unique_ptr<Transport> inner)
    : spec_(std::move(spec)), rank_(rank), inner_(std::move(inner)) {}

int64_t FaultTransport::Count(FaultOp op, int peer) {
  if (spec_.peer >= 0 && peer != spec_.peer) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  return calls_[static_cast<size_t>(op)]++;
}

Status FaultTransport::AbortedStatus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Aborted("fault transport aborted: " + abort_reason_.ToString());
}

bool FaultTransport::WaitForAbort(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::unique_lock<std::mutex> lock(mu_);
  while (!aborted_) {
    if (seconds >= 0 && std::chrono::steady_clock::now() >= end) return false;
    abort_cv_.wait_for(lock, kSlice);
  }
  return true;
}

Status FaultTransport::Strike(FaultOp op, int64_t call) {
  const std::string what = "rank " + std::to_string(rank_) + ": " + std::string(FaultOpName(op)) +
                           " call " + std::to_string(call + 1) + " (" + spec_.Describe() + ")";
  switch (spec_.action) {
    case FaultAction::kDelay:
      if (WaitForAbort(spec_.delay_seconds)) return AbortedStatus().WithContext("delayed " + what);
      return Status::Ok();
    case FaultAction::kError:
      return Unavailable("fault injected on " + what);
    case FaultAction::kHang:
      if (op == FaultOp::kAbort) {
        std::fprintf(stderr, "ferry: fault: Abort hangs for good on %s\n", what.c_str());
        HangForever();
      }
      WaitForAbort(-1);
      return AbortedStatus().WithContext("hung " + what);
    case FaultAction::kKill:
    case FaultAction::kStop:
      AnnounceAndSignal(rank_, FaultActionName(spec_.action));
      return Status::Ok();
    case FaultAction::kNone:
    case FaultAction::kDrop:
      return Status::Ok();
  }
  return Status::Ok();
}

Result<RequestId> FaultTransport::Dropped(FaultOp op, int64_t call, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Aborted("fault transport aborted: " + abort_reason_.ToString());
  }
  const RequestId id = next_dropped_++;
  std::fprintf(stderr, "ferry: fault: rank %d drops %s call %lld (%lld bytes)\n", rank_,
               std::string(FaultOpName(op)).c_str(), static_cast<long long>(call + 1),
               static_cast<long long>(bytes));
  if (op == FaultOp::kSend) {
    ready_.push_back(Completion{id, Status::Ok(), bytes});
  } else {
    swallowed_.push_back(id);
  }
  return id;
}

Status FaultTransport::Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) {
  const int64_t call = Count(FaultOp::kConnect, peer);
  if (Hits(FaultOp::kConnect, call)) FERRY_RETURN_IF_ERROR(Strike(FaultOp::kConnect, call));
  return inner_->Connect(peer, peer_info, deadline);
}

Result<MemoryHandle> FaultTransport::RegisterMemory(const MemoryDesc& memory) {
  const int64_t call = Count(FaultOp::kRegister, -1);
  if (Hits(FaultOp::kRegister, call)) FERRY_RETURN_IF_ERROR(Strike(FaultOp::kRegister, call));
  return inner_->RegisterMemory(memory);
}

Result<RequestId> FaultTransport::Post(FaultOp op, int peer, const LocalBuffer& buffer,
                                       const std::function<Result<RequestId>()>& forward) {
  const int64_t call = Count(op, peer);
  if (Hits(op, call)) {
    if (spec_.action == FaultAction::kDrop) return Dropped(op, call, buffer.bytes);
    FERRY_RETURN_IF_ERROR(Strike(op, call));
  }
  return forward();
}

Result<RequestId> FaultTransport::PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) {
  return Post(FaultOp::kSend, peer, buffer, [&] { return inner_->PostSend(peer, tag, buffer); });
}

Result<RequestId> FaultTransport::PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) {
  return Post(FaultOp::kRecv, peer, buffer, [&] { return inner_->PostRecv(peer, tag, buffer); });
}

Result<int> FaultTransport::Poll(std::span<Completion> out, Deadline deadline) {
  const int64_t call = Count(FaultOp::kPoll, -1);
  const bool hit = Hits(FaultOp::kPoll, call);
  if (hit && spec_.action != FaultAction::kDrop) FERRY_RETURN_IF_ERROR(Strike(FaultOp::kPoll, call));
  if (!swallowed_.empty() && WaitForAbort(0)) {
    const Status aborted = AbortedStatus();
    for (RequestId id : swallowed_) ready_.push_back(Completion{id, aborted, 0});
    swallowed_.clear();
  }
  const int ours = TakeCompletions(ready_, out);
  auto got = inner_->Poll(out.subspan(static_cast<size_t>(ours)),
                          ours > 0 ? Deadline::After(std::chrono::nanoseconds(0)) : deadline);
  if (!got.ok()) {
    if (ours > 0) return ours;  // the inner failure comes back on the next call
    return got.status();
  }
  if (hit && spec_.action == FaultAction::kDrop && *got > 0) {
    std::fprintf(stderr, "ferry: fault: rank %d drops %d completions of poll call %lld\n", rank_, *got,
                 static_cast<long long>(call + 1));
    return ours;
  }
  return ours + *got;
}

void FaultTransport::Abort(const Status& reason) {
  const int64_t call = Count(FaultOp::kAbort, -1);
  if (Hits(FaultOp::kAbort, call)) {
    if (spec_.action == FaultAction::kDelay) {
      std::this_thread::sleep_for(std::chrono::duration<double>(spec_.delay_seconds));
    } else {
      (void)Strike(FaultOp::kAbort, call);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = reason;
    }
  }
  abort_cv_.notify_all();
  inner_->Abort(reason);
}

Result<std::unique_ptr<Transport>> CreateFaultTransport(const TransportContext& context) {
  FERRY_ASSIGN_OR_RETURN(FaultSpec spec, FaultSpecFromContext(context));
  auto inner = TransportRegistry::Default().Create(spec.inner, context);
  if (!inner.ok()) return inner.status().WithContext("fault.inner=" + spec.inner);
  return std::unique_ptr<Transport>(new FaultTransport(std::move(spec), context.rank, std::move(*inner)));
}

namespace {
const TransportRegistrar kFaultRegistrar({
    "fault",
    "wraps fault.inner and injects one fault (delay, drop, error, hang, hung abort, kill, stop) "
    "into one op on one rank; for tests and failure research",
    FaultOptions(),
    &CreateFaultTransport,
});
}  // namespace

}  // namespace ferry::fault
