// Batched strided copies on a CUDA device: the pack/unpack engine of the GPU path. One launch moves
// many strided regions (each up to 8 dims) between device buffers, so a refit's thousands of small
// fragments cost one kernel, not thousands of cudaMemcpy2D calls.
//
// This header is plain C++ (no CUDA types) so that code built without nvcc can call it.
// Thread-safety: functions may be called from any thread; a launch is ordered on its stream.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::cuda {

inline constexpr int kMaxCopyDims = 8;

// One strided copy of `shape` elements of `elem_size` bytes. Strides are in bytes.
struct StridedCopy {
  const void* src = nullptr;  // device pointer
  void* dst = nullptr;        // device pointer
  int ndim = 1;
  int64_t elem_size = 1;
  std::array<int64_t, kMaxCopyDims> shape{};
  std::array<int64_t, kMaxCopyDims> src_strides{};
  std::array<int64_t, kMaxCopyDims> dst_strides{};
};

// Number of CUDA devices visible to this process; 0 when there is no GPU or no driver.
int DeviceCount();
// "NVIDIA H200 (sm_90, 132 SMs)" for device `device`, or the CUDA error text.
std::string DeviceName(int device);

// Enqueues every copy in `copies` on `stream` (a cudaStream_t, nullptr = default stream) as one
// kernel launch. Non-blocking: returns once launched; errors in the launch are returned, errors
// during execution surface at the next synchronisation. The descriptors of a few copies travel in
// the launch's parameters; more are copied to the device before returning. Either way `copies`
// may be freed immediately.
Status LaunchBatchedCopy(const std::vector<StridedCopy>& copies, void* stream);

// A batched copy's descriptors uploaded to device memory once and launched any number of times:
// a direct read of a reused plan copies the same regions every refit, and describing ~20,000
// regions again each time (building ~230 bytes a region and moving them from pageable memory)
// costs more than copying their bytes. Owns its device memory; one thread at a time.
class CopyTable {
 public:
  // Builds the descriptors of `copies` (checked as LaunchBatchedCopy checks them) and uploads
  // them, ordered on `stream` (a cudaStream_t on the current device). Non-blocking; `copies` may
  // be freed on return.
  static Result<std::unique_ptr<CopyTable>> Upload(const std::vector<StridedCopy>& copies,
                                                   void* stream);
  // Frees the descriptors ordered on the stream given to Upload (after every launch enqueued
  // there), which must still exist.
  ~CopyTable();
  CopyTable(const CopyTable&) = delete;
  CopyTable& operator=(const CopyTable&) = delete;

  // Enqueues every copy as one kernel launch on the Upload stream (none when the table is empty).
  // Non-blocking.
  Status Launch() const;
  // Enqueues the copies of every table in `tables`, all uploaded on one stream, as one kernel
  // launch on it (one a kMaxTablesPerLaunch tables): a kernel's start and last wave cost about
  // as much as a few microseconds of copying, so many small tables launched one by one run well
  // below the copy rate. Non-blocking. An empty table launches nothing.
  static Status LaunchTogether(std::span<const CopyTable* const> tables);
  static constexpr int kMaxTablesPerLaunch = 128;
  int64_t copies() const { return count_; }
  void* stream() const { return stream_; }  // the Upload stream

 private:
  CopyTable(void* stream, void* table, int64_t count, int64_t blocks)
      : stream_(stream), table_(table), count_(count), blocks_(blocks) {}
  void* stream_;
  void* table_;  // device memory: count_ descriptors, or nullptr when empty
  int64_t count_;
  int64_t blocks_;
};

// Blocks until all work on `stream` is done; returns the first asynchronous error.
Status SynchronizeStream(void* stream);

// Thin wrappers for tests and tools that must not include CUDA headers.
Result<void*> DeviceAlloc(int64_t bytes);
Status DeviceFree(void* ptr);
Status CopyToDevice(void* dst, const void* src, int64_t bytes);
Status CopyToHost(void* dst, const void* src, int64_t bytes);
// cudaMemcpyAsync device-to-device on `stream`: the reference the copy kernel is measured against.
Status CopyDeviceToDeviceAsync(void* dst, const void* src, int64_t bytes, void* stream);
// cudaMemcpy2DAsync device-to-device on `stream` (`height` rows of `width` bytes): what a copy per
// strided fragment costs, for the benchmark.
Status CopyDeviceToDevice2DAsync(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                                 int64_t width, int64_t height, void* stream);

}  // namespace ferry::cuda
