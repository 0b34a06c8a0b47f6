// The packed UE8M0 scale layout of DeepGEMM on SM100 (Blackwell): where each 128x128 block's
// power-of-two scale of a block-scaled fp8 matrix lies in the int32 tensor that vLLM keeps as
// weight_scale_inv there (Fp8ScaleFormat::kUe8m0Packed, core/base/fp8_scale_format.h).
//
// vLLM's DeepGEMM post-processing (vllm/model_executor/layers/quantization/utils/fp8_utils.py
// deepgemm_post_process_weight_scale_block) hands the fp32 UE8M0 scales [G, ceil(N/128),
// ceil(K/128)] of G [N, K] matrices to DeepGEMM's transform_sf_into_required_layout with recipe
// (1, 128, 128) (deepseek-ai/DeepGEMM csrc/apis/layout.hpp). On SM100 that repeats each block
// row's scales for each of its N weight rows and calls get_mn_major_tma_aligned_packed_ue8m0_tensor
// (csrc/jit_kernels/impls/smxx_layout.hpp; the kernel transpose_and_pack_fp32_into_ue8m0 in
// deep_gemm/include/deep_gemm/impls/smxx_layout.cuh):
//   S  = ceil(K/128) scales a row, P = ceil(S/4) int32 words a row, N4 = N rounded up to 4
//   (get_tma_aligned_size(N, 4): 16 bytes of TMA alignment)
//   a tensor int32 [G, N, P], strides [P * N4, 1, N4]: MN-major, word (g, n, p) at index
//   g * P * N4 + p * N4 + n; storage G * P * N4 words
//   word (g, n, p) = e0 | e1 << 8 | e2 << 16 | e3 << 24, e_j the biased fp32 exponent (bits 23..30)
//   of the scale of block (n / 128, 4p + j), 0 where 4p + j >= S
// so in memory (little-endian) byte j of a word is k-block 4p + j. vLLM 0.33.0 bundles DeepGEMM
// 2.8.1 with the same packing (vllm/third_party/deep_gemm/include/deep_gemm/impls/smxx_layout.cuh).
// Words of rows n in [N, N4) are never read by DeepGEMM (its TMA shape is N); torch::empty leaves
// them undefined there, DeepGEMM's torch fallback zeroes them, ferry writes 0. A NaN scale is
// written 0xff (E8M0's NaN; DeepGEMM traps on a scale with mantissa bits, so it never packs one).
//
// Plain functions (FERRY_HD); thread-safe: each block writes bytes no other block writes.
#pragma once

#include <cstdint>

#include "core/base/float_convert.h"

namespace ferry {

// N rounded up to 4: the word stride between packed columns.
FERRY_HD constexpr int64_t Fp8PackedScaleRowStride(int64_t rows) { return (rows + 3) / 4 * 4; }

// P: int32 words a row of a [rows, cols] matrix, four 128-column blocks each.
FERRY_HD constexpr int64_t Fp8PackedScaleWordsPerRow(int64_t cols) { return ((cols + 127) / 128 + 3) / 4; }

// Bytes of the packed scales of one [rows, cols] matrix.
FERRY_HD constexpr int64_t Fp8PackedScaleMatrixBytes(int64_t rows, int64_t cols) {
  return Fp8PackedScaleWordsPerRow(cols) * Fp8PackedScaleRowStride(rows) * 4;
}

// The E8M0 code of a power-of-two scale: its biased fp32 exponent; 0xff for NaN.
FERRY_HD inline uint8_t Fp8PackedScaleCode(float scale) {
  return static_cast<uint8_t>((FloatBits(scale) >> 23) & 0xffu);
}

// Writes row `row` of block column `block_col` with scale code `code` into one matrix's packed
// scales at `matrix_scales`: byte (block_col % 4) of word (row, block_col / 4), and the bytes after
// it in that word when block_col is the matrix's last block column (they are padding). Rows in
// [rows, N4) are padding: written 0. A block of rows [r0, r1) calls this for every row of
// [r0, min(r0 + 128, N4)), so the blocks together write every byte exactly once.
FERRY_HD inline void Fp8PackedScaleWriteRow(unsigned char* matrix_scales, int64_t rows, int64_t cols,
                                            int64_t row, int64_t block_col, uint8_t code) {
  const int64_t block_cols = (cols + 127) / 128;
  unsigned char* word = matrix_scales + (block_col / 4 * Fp8PackedScaleRowStride(rows) + row) * 4;
  const int64_t first = block_col % 4;
  const int64_t last = block_col == block_cols - 1 ? 3 : first;
  word[first] = row < rows ? code : 0;
  for (int64_t j = first + 1; j <= last; ++j) word[j] = 0;
}

}  // namespace ferry
