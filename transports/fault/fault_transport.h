// The "fault" transport: wraps another registered transport (fault.inner) and injects one fault,
// chosen by the fault.* options (fault_spec.h), into one operation on one rank: a delay, a dropped
// message or completion, an error, a call that hangs until Abort, an Abort that never returns (a
// library abort that hangs), or the process killed or stopped. Everything else is forwarded
// unchanged, so a refit over "fault" with fault.action=none is a refit over fault.inner.
//
// Researchers and tests use it to drive the abort, quarantine and failure-naming paths of the
// communicator and executor on CPU, on any transport:
//   transport.network=fault  fault.inner=tcp  fault.rank=1  fault.op=abort  fault.action=hang
//
// Requests: ids of forwarded calls are the inner transport's; dropped sends and receives get ids
// with the top bit set (kFaultRequestBit), which no transport of ferry hands out (they count from
// 1). A dropped send completes OK in the next Poll without sending; a dropped receive stays pending
// until Abort, then completes once with kAborted.
//
// Threading: as the Transport contract. Abort may come from any thread and wakes every call held
// by a delay or a hang (those then fail with kAborted), unless Abort itself is the call that hangs.
#pragma once

#include <array>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/runtime/transport.h"
#include "transports/fault/fault_spec.h"

namespace ferry::fault {

inline constexpr RequestId kFaultRequestBit = RequestId{1} << 63;

class FaultTransport final : public Transport {
 public:
  // Takes ownership of `inner`, created for the same context.
  FaultTransport(FaultSpec spec, int rank, std::unique_ptr<Transport> inner);

  std::string_view name() const override { return "fault"; }
  TransportCapabilities capabilities() const override { return inner_->capabilities(); }
  std::string DescribeLinks() const override { return inner_->DescribeLinks(); }
  Result<Bytes> LocalEndpointInfo() override { return inner_->LocalEndpointInfo(); }
  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override;
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override;
  Status DeregisterMemory(MemoryHandle memory) override { return inner_->DeregisterMemory(memory); }
  Result<Bytes> RemoteKey(MemoryHandle memory) override { return inner_->RemoteKey(memory); }
  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<RequestId> PostPut(int peer, uint64_t tag, const LocalBuffer& local,
                            const RemoteBuffer& remote) override {
    return inner_->PostPut(peer, tag, local, remote);
  }
  Result<RequestId> PostRecvNotify(int peer, uint64_t tag) override {
    return inner_->PostRecvNotify(peer, tag);
  }
  Result<int> Poll(std::span<Completion> out, Deadline deadline) override;
  Status Cancel(RequestId request) override { return inner_->Cancel(request); }
  Status BeginGroup() override { return inner_->BeginGroup(); }
  Status EndGroup() override { return inner_->EndGroup(); }
  void Abort(const Status& reason) override;

 private:
  // Counts a call of `op` (for `peer`, -1 when the op has none) and returns its 0-based number
  // among the calls the spec counts, or -1 when the spec does not count it.
  int64_t Count(FaultOp op, int peer);
  bool Hits(FaultOp op, int64_t call) const { return call >= 0 && spec_.Hits(op, rank_, call); }
  // Does a hit call's delay, error, hang, kill or stop (not drop). OK: forward the call now.
  Status Strike(FaultOp op, int64_t call);
  // Waits until Abort or `seconds` pass (forever when negative); true when aborted.
  bool WaitForAbort(double seconds);
  Status AbortedStatus() const;
  Result<RequestId> Dropped(FaultOp op, int64_t call, int64_t bytes);
  // PostSend and PostRecv: counts the call, drops or strikes it when hit, else calls `forward`.
  Result<RequestId> Post(FaultOp op, int peer, const LocalBuffer& buffer,
                         const std::function<Result<RequestId>()>& forward);

  const FaultSpec spec_;
  const int rank_;
  std::unique_ptr<Transport> inner_;
  mutable std::mutex mu_;                  // guards calls_, aborted_, abort_reason_
  std::condition_variable abort_cv_;
  std::array<int64_t, 6> calls_{};         // per FaultOp
  bool aborted_ = false;
  Status abort_reason_;
  // Driving thread only:
  std::deque<Completion> ready_;           // dropped sends, completed OK
  std::vector<RequestId> swallowed_;       // dropped receives, pending until Abort
  RequestId next_dropped_ = kFaultRequestBit | 1;
};

// Creates the fault transport for `context`: reads the spec, creates fault.inner from the default
// registry with the same context, and wraps it.
Result<std::unique_ptr<Transport>> CreateFaultTransport(const TransportContext& context);

}  // namespace ferry::fault
