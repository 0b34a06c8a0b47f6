// Block-scaled fp8 quantization on a CUDA device: the Quantize ops of the GPU path, and the
// direct reads that quantize as they read (core/runtime/quantizing_read.h). One launch quantizes
// many matrix stacks, or rectangles of their blocks, one CUDA block per 128x128 block (amax
// reduction, then the scale write and the e4m3fn cast of the block's elements), with the
// parameters of the CPU reference of core/base/fp8_block.h compiled for the device and the
// hardware's e4m3 cast, so the bits equal the host path's.
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

// A rectangle of whole 128x128 blocks of one matrix of a stack, quantized from wherever its
// values lie: block rows [block_row, block_row + block_rows) and block columns [block_col,
// block_col + block_cols) of matrix `matrix` of the [matrices, rows, cols] stack whose e4m3
// values start at `dst` and scales at `scales` (as BlockQuantizeJob's); a block at the matrix's
// last row or column holds what is left of it. The rectangle's source need not be the stack's:
// element (r, c) of the rectangle (matrix element (block_row * 128 + r, block_col * 128 + c)) is
// at `src` + r * `src_pitch` + c * the element size, so a rectangle can be read straight from a
// peer's tensor (a direct read that quantizes, core/runtime/quantizing_read.h) or from a staging
// twin. Rectangles of one stack write disjoint blocks and scales; together they may cover any
// subset of its blocks.
struct BlockQuantizeRect {
  const void* src = nullptr;
  int64_t src_pitch = 0;
  void* dst = nullptr;
  void* scales = nullptr;
  DType src_dtype = DType::kBF16;
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32;
  int64_t rows = 0, cols = 0;  // every matrix's of the stack
  int64_t matrix = 0;
  int64_t block_row = 0, block_rows = 0;
  int64_t block_col = 0, block_cols = 0;
};

// Whether the kernel quantizes `rect` with vector loads and stores: its columns a multiple of 16,
// its source rows and its fp8 destination aligned to 16 bytes. Anything else takes the byte walk,
// several times slower. Thread-safe.
bool BlockQuantizeVectorWalks(const BlockQuantizeRect& rect);

// Enqueues every rectangle on `stream` as one kernel launch (a few where their walks differ); the
// same bits as LaunchBlockQuantize of the whole stack. Non-blocking; `rects` may be freed on
// return. Errors as LaunchBlockQuantize's, and a rectangle outside its matrix or with a pitch
// shorter than its rows.
Status LaunchBlockQuantizeRects(const std::vector<BlockQuantizeRect>& rects, void* stream);

}  // namespace ferry::cuda
