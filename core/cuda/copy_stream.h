// CopyStream: a CUDA stream on one device on which the executor enqueues batched copies and
// conversions (a kernel launch each, core/cuda/batched_copy.h and batched_convert.h) and learns
// of their completion through CUDA events — never by synchronising the device. Also pinned (page-locked, mapped) host memory, which the
// copy kernel reads and writes directly: the staging of CUDA data for transports without
// GPU-direct.
//
// Plain C++ (no CUDA types), so the runtime can use it without nvcc.
// Thread-safety: a CopyStream belongs to one thread at a time (the executor's); every call sets
// that thread's current device to the stream's first. Pinned allocation functions are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/batched_convert.h"
#include "core/cuda/batched_copy.h"
#include "core/cuda/block_quantize.h"

namespace ferry::cuda {

// The copies and conversions of one piece of recurring work (a direct read of a reused plan),
// uploaded once by CopyStream::Upload and launched by CopyStream::Launch as often as needed.
struct WorkTables {
  std::unique_ptr<CopyTable> copies;
  std::unique_ptr<ConvertTable> converts;
};

class CopyStream {
 public:
  // A non-blocking stream on `device`. Fails when there is no such device.
  static Result<std::unique_ptr<CopyStream>> Create(int device);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  int device() const { return device_; }
  void* stream() const { return stream_; }  // the cudaStream_t

  // Enqueues `copies` as one kernel launch and `converts` as another (core/cuda/batched_convert.h;
  // none when empty), followed by an event; returns the ticket that Finished() asks about.
  // Non-blocking. The vectors may be freed on return.
  Result<int64_t> Launch(const std::vector<StridedCopy>& copies,
                         const std::vector<StridedConvert>& converts = {});
  // Enqueues the work of `tables` (their copies as one kernel, CopyTable::LaunchTogether; then
  // their conversions as another, ConvertTable::LaunchTogether), then `copies` and `converts`,
  // followed by one event; a ticket as above. Non-blocking.
  Result<int64_t> Launch(std::span<const WorkTables* const> tables,
                         const std::vector<StridedCopy>& copies,
                         const std::vector<StridedConvert>& converts);
  // Uploads the descriptors of `copies` and `converts` for launches on this stream. Non-blocking.
  // The tables must be destroyed before the stream.
  Result<std::unique_ptr<WorkTables>> Upload(const std::vector<StridedCopy>& copies,
                                             const std::vector<StridedConvert>& converts);
  // Enqueues `quantizes` as one kernel launch (core/cuda/block_quantize.h), followed by an event;
  // a ticket as above. Non-blocking.
  Result<int64_t> Quantize(const std::vector<BlockQuantizeJob>& quantizes);
  // Enqueues `rects` likewise (LaunchBlockQuantizeRects); a ticket as above. Non-blocking.
  Result<int64_t> QuantizeRects(const std::vector<BlockQuantizeRect>& rects);
  // True when the work of `ticket` (and everything enqueued before it) has finished; the first
  // asynchronous error of the stream otherwise. A finished ticket's event is recycled: ask once.
  Result<bool> Finished(int64_t ticket);

 private:
  CopyStream(int device, void* stream) : device_(device), stream_(stream) {}
  Result<void*> TakeEvent();
  Result<int64_t> RecordTicket();

  int device_;
  void* stream_;
  struct Pending {
    int64_t ticket;
    void* event;
  };
  std::deque<Pending> pending_;  // in ticket order
  std::vector<void*> free_events_;
  int64_t next_ticket_ = 1;
};

// Page-locked host memory, portable to every context and mapped into the device address space
// (with unified addressing the host pointer is the device pointer). Blocking.
Result<void*> PinnedAlloc(int64_t bytes);
Status PinnedFree(void* ptr);

// cudaMemset(ptr, 0, bytes) on device memory, blocking; for tools and tests.
Status ZeroDevice(void* ptr, int64_t bytes);
// Selects `device` for the calling thread.
Status SetDevice(int device);

}  // namespace ferry::cuda
