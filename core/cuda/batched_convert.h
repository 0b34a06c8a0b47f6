// Batched strided conversions on a CUDA device: the Convert ops of the GPU path. One launch
// converts many strided regions (each up to kMaxCopyDims dims) between device buffers (or
// mapped pinned host memory), element by element with the CPU reference of
// core/base/float_convert.h compiled for the device, so the bits equal the host path's.
//
// Plain C++ (no CUDA types). Thread-safety: as batched_copy.h; a launch is ordered on its stream.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

// One strided conversion of `shape` elements from `src_dtype` to `dst_dtype` (both bf16, fp16,
// fp32, fp8_e4m3 or fp8_e5m2). Strides are in bytes, per side; any alignment.
struct StridedConvert {
  const void* src = nullptr;  // device pointer
  void* dst = nullptr;        // device pointer
  DType src_dtype = DType::kFP32;
  DType dst_dtype = DType::kFP32;
  int ndim = 1;
  std::array<int64_t, kMaxCopyDims> shape{};
  std::array<int64_t, kMaxCopyDims> src_strides{};
  std::array<int64_t, kMaxCopyDims> dst_strides{};
};

// Enqueues every conversion in `converts` on `stream` (a cudaStream_t, nullptr = default stream)
// as one kernel launch. Non-blocking, like LaunchBatchedCopy; `converts` may be freed on return.
// An unsupported dtype or a bad ndim is an error naming the conversion.
Status LaunchBatchedConvert(const std::vector<StridedConvert>& converts, void* stream);

}  // namespace ferry::cuda
