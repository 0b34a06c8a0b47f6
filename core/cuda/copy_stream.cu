// CopyStream, pinned host memory: see copy_stream.h.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/cuda/copy_stream.h"
#include "core/cuda/device_table.cuh"

namespace ferry::cuda {
Result<std::unique_ptr<CopyStream>> CopyStream::Create(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return FailedPrecondition("CUDA device " + std::to_string(device) + " does not exist (" +
                              std::to_string(count) + " visible)");
  }
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                   "cudaStreamCreate"));
  return std::unique_ptr<CopyStream>(new CopyStream(device, stream));
}

CopyStream::~CopyStream() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (const Pending& p : pending_) cudaEventDestroy(static_cast<cudaEvent_t>(p.event));
  for (void* e : free_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Result<void*> CopyStream::TakeEvent() {
  if (!free_events_.empty()) {
    void* e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t event = nullptr;
  FERRY_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  return static_cast<void*>(event);
}

Result<int64_t> CopyStream::Launch(const std::vector<StridedCopy>& copies,
                                   const std::vector<StridedConvert>& converts) {
  return Launch({}, copies, converts);
}

Result<int64_t> CopyStream::Launch(std::span<const WorkTables* const> tables,
                                   const std::vector<StridedCopy>& copies,
                                   const std::vector<StridedConvert>& converts) {
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  std::vector<const CopyTable*> copy_tables;
  std::vector<const ConvertTable*> convert_tables;
  copy_tables.reserve(tables.size());
  for (const WorkTables* t : tables) {
    if (t->copies != nullptr) copy_tables.push_back(t->copies.get());
    if (t->converts != nullptr) convert_tables.push_back(t->converts.get());
  }
  FERRY_RETURN_IF_ERROR(CopyTable::LaunchTogether(copy_tables));
  FERRY_RETURN_IF_ERROR(ConvertTable::LaunchTogether(convert_tables));
  FERRY_RETURN_IF_ERROR(LaunchBatchedCopy(copies, stream_));
  FERRY_RETURN_IF_ERROR(LaunchBatchedConvert(converts, stream_));
  return RecordTicket();
}

Result<std::unique_ptr<WorkTables>> CopyStream::Upload(const std::vector<StridedCopy>& copies,
                                                       const std::vector<StridedConvert>& converts) {
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  auto tables = std::make_unique<WorkTables>();
  if (!copies.empty()) {
    FERRY_ASSIGN_OR_RETURN(tables->copies, CopyTable::Upload(copies, stream_));
  }
  if (!converts.empty()) {
    FERRY_ASSIGN_OR_RETURN(tables->converts, ConvertTable::Upload(converts, stream_));
  }
  return Result<std::unique_ptr<WorkTables>>(std::move(tables));
}

Result<int64_t> CopyStream::Quantize(const std::vector<BlockQuantizeJob>& quantizes) {
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  FERRY_RETURN_IF_ERROR(LaunchBlockQuantize(quantizes, stream_));
  return RecordTicket();
}

Result<int64_t> CopyStream::QuantizeRects(const std::vector<BlockQuantizeRect>& rects) {
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  FERRY_RETURN_IF_ERROR(LaunchBlockQuantizeRects(rects, stream_));
  return RecordTicket();
}

// An event after everything enqueued so far, as the next ticket.
Result<int64_t> CopyStream::RecordTicket() {
  FERRY_ASSIGN_OR_RETURN(void* event, TakeEvent());
  Status recorded = CudaStatus(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream_)),
      "cudaEventRecord");
  if (!recorded.ok()) {
    free_events_.push_back(event);
    return recorded;
  }
  pending_.push_back({next_ticket_, event});
  return next_ticket_++;
}

Result<bool> CopyStream::Finished(int64_t ticket) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->ticket != ticket) continue;
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(it->event));
    if (err == cudaErrorNotReady) return false;
    free_events_.push_back(it->event);
    pending_.erase(it);
    FERRY_RETURN_IF_ERROR(CudaStatus(err, "batched copy on CUDA device " + std::to_string(device_)));
    return true;
  }
  return InvalidArgument("unknown CUDA copy ticket " + std::to_string(ticket));
}

Result<void*> PinnedAlloc(int64_t bytes) {
  void* p = nullptr;
  FERRY_RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1),
                    cudaHostAllocPortable | cudaHostAllocMapped),
      "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
  return p;
}

Status PinnedFree(void* ptr) { return CudaStatus(cudaFreeHost(ptr), "cudaFreeHost"); }

Status ZeroDevice(void* ptr, int64_t bytes) {
  return CudaStatus(cudaMemset(ptr, 0, static_cast<size_t>(bytes)), "cudaMemset");
}

Status SetDevice(int device) { return CudaStatus(cudaSetDevice(device), "cudaSetDevice"); }

}  // namespace ferry::cuda
