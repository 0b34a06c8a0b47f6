// NcclTransport: see nccl_transport.h.
#include "transports/nccl/nccl_transport.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/runtime/abort_state.h"
#include "transports/nccl/deferred_group.h"
#include "transports/nccl/nccl_comm.h"

namespace ferry {
namespace {

Status CudaError(const std::string& what, cudaError_t error) {
  return Unavailable("nccl: " + what + ": " + cudaGetErrorString(error));
}

class NcclTransport final : public Transport {
 public:
  NcclTransport(const TransportContext& context, NcclOptions options,
                std::shared_ptr<const NcclLibrary> library)
      : context_(context),
        options_(std::move(options)),
        comm_(std::make_shared<NcclComm>(std::move(library))),
        abort_("nccl") {}

  ~NcclTransport() override {
    NcclComm::AbortAsync(comm_);  // tears the communicator down, ours or not, without waiting
    if (!comm_->AwaitAbort(Deadline::AfterSeconds(options_.abort_seconds))) {
      std::fprintf(stderr,
                   "ferry: nccl: ncclCommAbort on rank %d (epoch %llu) has not returned after "
                   "%.1fs; its communicator, stream and events are leaked\n",
                   context_.rank, static_cast<unsigned long long>(context_.epoch),
                   options_.abort_seconds);
      return;
    }
    for (Batch& batch : batches_) {
      if (batch.event != nullptr) cudaEventDestroy(batch.event);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "nccl"; }

  TransportCapabilities capabilities() const override {
    TransportCapabilities c;
    c.host_memory = false;
    c.cuda_memory = true;
    c.grouped = true;
    c.latency_seconds = 20e-6;
    c.bandwidth_bytes_per_second = 100e9;
    return c;
  }

  Result<Bytes> LocalEndpointInfo() override { return Bytes{}; }
  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override;
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override;
  Status DeregisterMemory(MemoryHandle memory) override;
  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    return Post(true, peer, tag, buffer);
  }
  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    return Post(false, peer, tag, buffer);
  }
  Result<int> Poll(std::span<Completion> out, Deadline deadline) override;
  Status BeginGroup() override;
  Status EndGroup() override;
  void Abort(const Status& reason) override {
    if (abort_.Abort(reason)) NcclComm::AbortAsync(comm_);
  }

 private:
  // One ncclGroupStart/End of deferred ops; `event` is recorded once NCCL has enqueued it.
  struct Batch {
    std::vector<DeferredOp> ops;
    cudaEvent_t event = nullptr;
  };

  Status SetUpDevice();
  Result<RequestId> Post(bool send, int peer, uint64_t tag, const LocalBuffer& buffer);
  void Seal();
  Status Pump();
  Status IssueOps(const std::vector<DeferredOp>& ops);
  Status Progress();
  void Fail(const Status& status);
  void Advance();

  const TransportContext context_;
  const NcclOptions options_;
  const std::shared_ptr<NcclComm> comm_;
  AbortState abort_;
  int device_ = -1;
  bool initialised_ = false;
  cudaStream_t stream_ = nullptr;
  std::set<int> connected_;
  std::map<uint64_t, MemoryDesc> memory_;
  uint64_t next_handle_ = 1;
  RequestId next_request_ = 1;
  bool in_group_ = false;
  DeferredGroup deferred_;
  std::deque<std::vector<DeferredOp>> sealed_;  // groups waiting for their turn to be issued
  std::deque<Batch> batches_;  // issued, in issue order (events complete in this order)
  std::deque<Completion> ready_;
  Status failure_;  // the first error of the communicator; every request after it fails with it
};

// The communicator's device: nccl.device, else the caller's current one; a stream of our own.
Status NcclTransport::SetUpDevice() {
  device_ = options_.device;
  if (device_ < 0) {
    if (cudaError_t e = cudaGetDevice(&device_); e != cudaSuccess) {
      return CudaError("no current CUDA device", e);
    }
  }
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return CudaError("cannot use CUDA device " + std::to_string(device_), e);
  }
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
    return CudaError("creating a stream", e);
  }
  return Status::Ok();
}

Status NcclTransport::Connect(int peer, std::span<const uint8_t>, Deadline deadline) {
  FERRY_RETURN_IF_ERROR(abort_.status());
  FERRY_RETURN_IF_ERROR(CheckConnectablePeer(peer, context_.size, connected_.count(peer) != 0));
  if (!initialised_) {
    FERRY_RETURN_IF_ERROR(SetUpDevice());
    NcclComm::Setup setup{context_.rank, context_.size, context_.store,
                          "e" + std::to_string(context_.epoch) + "/nccl/unique_id"};
    FERRY_RETURN_IF_ERROR(comm_->Init(setup, deadline));
    initialised_ = true;
  }
  connected_.insert(peer);
  return Status::Ok();
}

Result<MemoryHandle> NcclTransport::RegisterMemory(const MemoryDesc& memory) {
  FERRY_RETURN_IF_ERROR(abort_.status());
  if (memory.kind != MemoryKind::kCuda) {
    return Unimplemented("nccl moves CUDA memory only: refused " +
                         std::string(MemoryKindName(memory.kind)) + " memory of " +
                         std::to_string(memory.bytes) + " bytes (use CUDA buffers, or another "
                         "transport for host memory)");
  }
  if (memory.bytes < 0 || (memory.base == nullptr && memory.bytes > 0)) {
    return InvalidArgument("nccl: invalid memory block (" + std::to_string(memory.bytes) + " bytes)");
  }
  if (device_ >= 0 && memory.device != device_) {
    return InvalidArgument("nccl: CUDA memory of device " + std::to_string(memory.device) +
                           ", but the communicator is on device " + std::to_string(device_));
  }
  const uint64_t id = next_handle_++;
  memory_[id] = memory;
  return MemoryHandle{id};
}

Status NcclTransport::DeregisterMemory(MemoryHandle memory) {
  if (memory_.erase(memory.id) == 0) {
    return NotFound("nccl: no registration " + std::to_string(memory.id));
  }
  return Status::Ok();
}

Result<RequestId> NcclTransport::Post(bool send, int peer, uint64_t tag, const LocalBuffer& buffer) {
  FERRY_RETURN_IF_ERROR(abort_.status());
  FERRY_RETURN_IF_ERROR(failure_);
  if (connected_.count(peer) == 0) {
    return FailedPrecondition("nccl: peer " + std::to_string(peer) + " is not connected");
  }
  auto it = memory_.find(buffer.memory.id);
  if (it == memory_.end()) {
    return InvalidArgument("nccl: unknown registration " + std::to_string(buffer.memory.id));
  }
  if (buffer.offset < 0 || buffer.bytes < 0 || buffer.offset > it->second.bytes ||
      buffer.bytes > it->second.bytes - buffer.offset) {
    return OutOfRange("nccl: " + std::to_string(buffer.bytes) + " bytes at offset " +
                      std::to_string(buffer.offset) + " overrun a registration of " +
                      std::to_string(it->second.bytes) + " bytes");
  }
  DeferredOp op{send, peer, tag, static_cast<char*>(it->second.base) + buffer.offset,
                buffer.bytes, next_request_++};
  deferred_.Add(op);
  return op.request;
}

Status NcclTransport::BeginGroup() {
  FERRY_RETURN_IF_ERROR(abort_.status());
  if (in_group_) return FailedPrecondition("nccl: BeginGroup inside a group");
  in_group_ = true;
  return Status::Ok();
}

Status NcclTransport::EndGroup() {
  if (!in_group_) return FailedPrecondition("nccl: EndGroup without BeginGroup");
  in_group_ = false;
  FERRY_RETURN_IF_ERROR(abort_.status());
  Seal();
  Advance();
  return Status::Ok();  // a failed group fails its requests, reported by Poll
}

// The ops deferred so far become one group, in (peer, tag) order, queued for Pump.
void NcclTransport::Seal() {
  if (!deferred_.empty()) sealed_.push_back(deferred_.Take());
}

// Issues sealed groups, one at a time: while NCCL is still enqueuing a group of a non-blocking
// communicator (ncclInProgress) it takes no other call on it, so the next group waits until the
// previous one's event is recorded (Progress). Never blocks.
Status NcclTransport::Pump() {
  while (true) {
    FERRY_RETURN_IF_ERROR(Progress());
    const bool enqueuing = !batches_.empty() && batches_.back().event == nullptr;
    if (sealed_.empty() || enqueuing) return Status::Ok();
    std::vector<DeferredOp> ops = std::move(sealed_.front());
    sealed_.pop_front();
    Status issued = IssueOps(ops);
    batches_.push_back(Batch{std::move(ops), nullptr});
    FERRY_RETURN_IF_ERROR(issued);
  }
}

// Pump, failing every request when the communicator or a call failed.
void NcclTransport::Advance() {
  if (!failure_.ok() || abort_.aborted()) return;
  if (Status s = Pump(); !s.ok()) Fail(s);
}

// ncclGroupStart, each op in order, ncclGroupEnd: ncclGroupEnd is always called once the group
// started, even after a failed op, so that NCCL's group state stays balanced.
Status NcclTransport::IssueOps(const std::vector<DeferredOp>& ops) {
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) return CudaError("cudaSetDevice", e);
  const NcclLibrary& nccl = comm_->library();
  FERRY_ASSIGN_OR_RETURN(ncclResult_t started, comm_->Call([&](ncclComm_t) {
                           return nccl.GroupStart();
                         }));
  if (started != ncclSuccess) return Unavailable("nccl: " + nccl.Describe("ncclGroupStart", started));
  Status first;
  for (const DeferredOp& op : ops) {
    const size_t count = static_cast<size_t>(op.bytes);
    auto r = comm_->Call([&](ncclComm_t c) {
      return op.send ? nccl.Send(op.data, count, ncclUint8, op.peer, c, stream_)
                     : nccl.Recv(op.data, count, ncclUint8, op.peer, c, stream_);
    });
    if (first.ok() && !r.ok()) first = r.status();
    if (first.ok() && *r != ncclSuccess && *r != ncclInProgress) {
      first = Unavailable("nccl: " + nccl.Describe(op.send ? "ncclSend" : "ncclRecv", *r) +
                          " to peer " + std::to_string(op.peer));
    }
  }
  FERRY_ASSIGN_OR_RETURN(ncclResult_t ended, comm_->Call([&](ncclComm_t) {
                           return nccl.GroupEnd();
                         }));
  FERRY_RETURN_IF_ERROR(first);
  if (ended != ncclSuccess && ended != ncclInProgress) {
    return Unavailable("nccl: " + nccl.Describe("ncclGroupEnd", ended));
  }
  return Status::Ok();
}

// Records the event of every batch NCCL has finished enqueuing (the communicator leaves
// ncclInProgress), or fails everything when the communicator reports an error.
Status NcclTransport::Progress() {
  if (batches_.empty() || batches_.back().event != nullptr) return Status::Ok();
  FERRY_ASSIGN_OR_RETURN(ncclResult_t state, comm_->AsyncState());
  if (state == ncclInProgress) return Status::Ok();
  if (state != ncclSuccess) {
    return Unavailable("nccl: communicator failed: " +
                       comm_->library().Describe("ncclCommGetAsyncError", state));
  }
  for (Batch& batch : batches_) {
    if (batch.event != nullptr) continue;
    if (cudaError_t e = cudaEventCreateWithFlags(&batch.event, cudaEventDisableTiming);
        e != cudaSuccess) {
      return CudaError("creating an event", e);
    }
    if (cudaError_t e = cudaEventRecord(batch.event, stream_); e != cudaSuccess) {
      return CudaError("recording an event", e);
    }
  }
  return Status::Ok();
}

// Fails every request not yet completed with `status`; later posts fail with it too.
void NcclTransport::Fail(const Status& status) {
  if (failure_.ok()) failure_ = status;
  for (Batch& batch : batches_) {
    for (const DeferredOp& op : batch.ops) ready_.push_back({op.request, status, 0});
    batch.ops.clear();
  }
  Seal();
  for (const std::vector<DeferredOp>& group : sealed_) {
    for (const DeferredOp& op : group) ready_.push_back({op.request, status, 0});
  }
  sealed_.clear();
}

Result<int> NcclTransport::Poll(std::span<Completion> out, Deadline deadline) {
  for (int idle = 0;; ++idle) {
    if (abort_.TakeDrain()) Fail(abort_.status());
    if (!in_group_) Seal();
    Advance();
    while (!abort_.aborted() && !batches_.empty() && batches_.front().event != nullptr) {
      cudaError_t e = cudaEventQuery(batches_.front().event);
      if (e == cudaErrorNotReady) break;
      Batch& batch = batches_.front();
      Status status = e == cudaSuccess ? Status::Ok() : CudaError("a send/recv batch failed", e);
      for (const DeferredOp& op : batch.ops) ready_.push_back({op.request, status, op.bytes});
      cudaEventDestroy(batch.event);
      batches_.pop_front();
    }
    if (!ready_.empty()) return TakeCompletions(ready_, out);
    if (abort_.aborted()) return abort_.status();
    if (deadline.Expired()) return 0;
    IdlePollBackoff(idle);
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> CreateNcclTransport(const TransportContext& context) {
  FERRY_ASSIGN_OR_RETURN(NcclOptions options, NcclOptions::FromContext(context));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const NcclLibrary> library,
                         NcclLibrary::Load(options.library));
  return std::unique_ptr<Transport>(
      std::make_unique<NcclTransport>(context, std::move(options), std::move(library)));
}

TransportRegistration NcclTransportRegistration() {
  return {"nccl", "NCCL send/recv between CUDA buffers (dlopen'd libnccl, non-blocking communicator)",
          NcclOptions::Table(), &CreateNcclTransport};
}

namespace {
const TransportRegistrar kNcclRegistrar(NcclTransportRegistration());
}  // namespace

}  // namespace ferry
