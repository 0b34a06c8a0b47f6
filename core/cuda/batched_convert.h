// Batched strided conversions on a CUDA device: the Convert ops of the GPU path. One launch
// converts many strided regions (each up to kMaxCopyDims dims) between device buffers (or
// mapped pinned host memory), element by element with the CPU reference of
// core/base/float_convert.h compiled for the device, so the bits equal the host path's; an
// element function (core/base/element_fn.h) runs with the device's math (expf: within 2 ulp of
// the host's std::exp).
//
// Plain C++ (no CUDA types). Thread-safety: as batched_copy.h; a launch is ordered on its stream.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/element_fn.h"
#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

// One strided conversion of `shape` elements from `src_dtype` to `dst_dtype` (both bf16, fp16,
// fp32, fp8_e4m3 or fp8_e5m2), applying `fn` to each element's fp32 value (core/base/element_fn.h;
// its pair of dtypes must be one ElementFnApplies accepts). Strides are in bytes, per side; any
// alignment.
struct StridedConvert {
  const void* src = nullptr;  // device pointer
  void* dst = nullptr;        // device pointer
  DType src_dtype = DType::kFP32;
  DType dst_dtype = DType::kFP32;
  ElementFn fn = ElementFn::kNone;
  int ndim = 1;
  std::array<int64_t, kMaxCopyDims> shape{};
  std::array<int64_t, kMaxCopyDims> src_strides{};
  std::array<int64_t, kMaxCopyDims> dst_strides{};
};

// A batched conversion's descriptors uploaded once and launched any number of times, as
// CopyTable (batched_copy.h) for copies, with the same contract.
class ConvertTable {
 public:
  // Builds the descriptors of `converts` (checked as LaunchBatchedConvert checks them) and
  // uploads them, ordered on `stream`. Non-blocking.
  static Result<std::unique_ptr<ConvertTable>> Upload(const std::vector<StridedConvert>& converts,
                                                      void* stream);
  // Frees the descriptors ordered on the Upload stream, which must still exist.
  ~ConvertTable();
  ConvertTable(const ConvertTable&) = delete;
  ConvertTable& operator=(const ConvertTable&) = delete;

  // Enqueues every conversion as one kernel launch on the Upload stream (none when empty).
  Status Launch() const;
  // Enqueues the conversions of every table in `tables`, all uploaded on one stream, as one kernel
  // launch on it (one a kMaxTablesPerLaunch tables), as CopyTable::LaunchTogether does for copies.
  // Non-blocking. An empty table launches nothing.
  static Status LaunchTogether(std::span<const ConvertTable* const> tables);
  static constexpr int kMaxTablesPerLaunch = 128;
  int64_t converts() const { return count_; }
  void* stream() const { return stream_; }  // the Upload stream

 private:
  ConvertTable(void* stream, void* table, int64_t count, int64_t blocks)
      : stream_(stream), table_(table), count_(count), blocks_(blocks) {}
  void* stream_;
  void* table_;  // device memory: count_ descriptors, or nullptr when empty
  int64_t count_;
  int64_t blocks_;
};

// Whether the kernel converts `convert` (a valid one) with vector loads and stores: the innermost
// dimension dense on both sides, its length a multiple of the kernel's group for that pair of
// dtypes (8 to 32 elements), every row start aligned to 16 bytes or to the group's size. Anything
// else is converted element by element, several times slower. Thread-safe.
bool VectorWalks(const StridedConvert& convert);

// Enqueues every conversion in `converts` on `stream` (a cudaStream_t, nullptr = default stream)
// as one kernel launch. Non-blocking, like LaunchBatchedCopy; `converts` may be freed on return.
// An unsupported dtype or a bad ndim is an error naming the conversion.
Status LaunchBatchedConvert(const std::vector<StridedConvert>& converts, void* stream);

}  // namespace ferry::cuda
