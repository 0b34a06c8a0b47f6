// Block-scaled fp8 quantization on a CUDA device: the Quantize ops of the GPU path. One launch
// quantizes many matrix stacks, one CUDA block per 128x128 block (amax reduction, then the scale
// write and the e4m3fn cast of the block's elements), with the parameters of the CPU reference of
// core/base/fp8_block.h compiled for the device and the hardware's e4m3 cast, so the bits equal the
// host path's.
//
// Plain C++ (no CUDA types). Thread-safety: as batched_copy.h; a launch is ordered on its stream.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/fp8_scale_format.h"
#include "core/base/status.h"

namespace ferry::cuda {

// `matrices` dense row-major [rows, cols] matrices of `src_dtype` (bf16, fp16 or fp32) at `src`
// quantized into dense e4m3fn matrices at `dst` and their scale_inv in format `scale_fmt` at
// `scales`: dense fp32 [matrices, ceil(rows/128), ceil(cols/128)], or for kUe8m0Packed DeepGEMM's
// SM100 codes (core/base/fp8_packed_scales.h), as core/base/fp8_block.h writes them. Device pointers
// (or mapped pinned host memory); `src` and `dst` may start at any byte, `scales` at any 4-byte
// boundary.
struct BlockQuantizeJob {
  const void* src = nullptr;
  void* dst = nullptr;
  void* scales = nullptr;
  DType src_dtype = DType::kBF16;
  int64_t matrices = 1, rows = 0, cols = 0;
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32;
};

// Enqueues every job on `stream` (a cudaStream_t, nullptr = default stream) as one kernel launch.
// Non-blocking; `jobs` may be freed on return. An unsupported dtype, a negative size or a
// misaligned scale pointer is an error naming the job.
Status LaunchBlockQuantize(const std::vector<BlockQuantizeJob>& jobs, void* stream);

}  // namespace ferry::cuda
