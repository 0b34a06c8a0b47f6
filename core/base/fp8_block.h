// Block-scaled fp8 quantization (128x128 blocks, the weight format of DeepSeek-V3 and Kimi-K2
// checkpoints as vLLM serves them): the CPU reference that the host executor, the CUDA kernel
// (core/cuda/block_quantize.cu compiles this same header) and `ferry run --verify` all use.
//
// A matrix [rows, cols] is cut into 128x128 blocks from its first element (the last block row and
// column may be partial). Per block, exactly as vllm/utils/deep_gemm.py per_block_cast_to_fp8
// (use_ue8m0=False; taken by vLLM from DeepGEMM's deep_gemm/utils/math.py) computes it in fp32:
//   amax      = max |x| over the block's elements (x read exactly as fp32)
//   scale_inv = max(amax, 1e-4f) / 448.0f           (the value vLLM's weight_scale_inv holds;
//                                                    an all-zero block gets 1e-4f / 448)
//   q         = e4m3fn(x * (1.0f / scale_inv))      (one fp32 multiply by the fp32 reciprocal,
//                                                    then float_convert.h's round-to-nearest-even)
// so that dequantizing, w = float(q) * scale_inv, is what vLLM's fp8.py Fp8LinearMethod and
// Fp8MoEMethod apply with weight_scale_inv. Every operation is IEEE fp32 with round-to-nearest
// (the CUDA build uses the _rn intrinsics so no fast-math contraction changes a bit); inputs in
// the subnormal range are kept.
// inf/NaN policy (torch's arithmetic, with NaN canonicalised):
//   - a block holding a NaN has amax NaN, so its scale_inv is NaN (written as 0x7fc00000) and
//     every q of the block is NaN;
//   - a block holding ±inf (and no NaN) has scale_inv +inf; its finite elements give ±0 and its
//     infinities NaN (inf * 0);
//   - every NaN q is written as 0x7f: the sign of a NaN that fp32 arithmetic creates differs
//     between x86 and CUDA, so ferry fixes it.
// The e4m3fn cast saturates at ±448 (float_convert.h); a finite scaled value never exceeds 448 by
// more than its rounding, so this agrees with torch's cast, which gives NaN only from 480 on.
//
// Plain functions (FERRY_HD); thread-safe.
#pragma once

#include <cstdint>

#include "core/base/dtype.h"
#include "core/base/float_convert.h"

namespace ferry {

inline constexpr int64_t kFp8BlockSize = 128;

FERRY_HD inline float Fp8BlockDiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FERRY_HD inline float Fp8BlockMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The running |x| maximum of a block, NaN-propagating (as torch's amax): `amax` after one more
// element `x`.
FERRY_HD inline float Fp8BlockAmaxStep(float amax, float x) {
  const float a = BitsToFloat(FloatBits(x) & 0x7fffffffu);
  if (a != a || amax != amax) return BitsToFloat(0x7fc00000u);
  return a > amax ? a : amax;
}

// scale_inv of a block whose |x| maximum is `amax` (NaN gives the canonical NaN).
FERRY_HD inline float Fp8BlockScaleInv(float amax) {
  if (amax != amax) return BitsToFloat(0x7fc00000u);
  return Fp8BlockDiv(amax < 1e-4f ? 1e-4f : amax, 448.0f);
}

// The multiplier of a block's elements: 1 / scale_inv (0 for an infinite scale, NaN for NaN).
FERRY_HD inline float Fp8BlockMultiplier(float scale_inv) { return Fp8BlockDiv(1.0f, scale_inv); }

// The e4m3fn bits of element `x` of a block whose multiplier is `multiplier`.
FERRY_HD inline uint8_t Fp8BlockQuantize(float x, float multiplier) {
  const float v = Fp8BlockMul(x, multiplier);
  if (v != v) return 0x7f;
  return static_cast<uint8_t>(FloatToSmall(v, kE4M3Format, true));
}

// Quantizes `matrices` dense row-major [rows, cols] matrices of `src_dtype` (bf16, fp16 or fp32)
// at `src` into dense e4m3fn matrices at `dst` and their scale_inv at `scales`: dense fp32
// [matrices, ceil(rows/128), ceil(cols/128)]. Host only; the reference of every other path.
inline void Fp8BlockQuantizeMatrices(DType src_dtype, const unsigned char* src, int64_t matrices,
                                     int64_t rows, int64_t cols, unsigned char* dst, float* scales) {
  const int64_t elem = FloatBytes(src_dtype);
  const int64_t block_rows = (rows + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t block_cols = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t br = 0; br < block_rows; ++br) {
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t r0 = br * kFp8BlockSize, c0 = bc * kFp8BlockSize;
        const int64_t r1 = r0 + kFp8BlockSize < rows ? r0 + kFp8BlockSize : rows;
        const int64_t c1 = c0 + kFp8BlockSize < cols ? c0 + kFp8BlockSize : cols;
        const int64_t base = m * rows * cols;
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) {
            amax = Fp8BlockAmaxStep(amax, LoadAsFloat(src_dtype, src + (base + r * cols + c) * elem));
          }
        }
        const float scale_inv = Fp8BlockScaleInv(amax);
        scales[(m * block_rows + br) * block_cols + bc] = scale_inv;
        const float multiplier = Fp8BlockMultiplier(scale_inv);
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t i = base + r * cols + c;
            dst[i] = Fp8BlockQuantize(LoadAsFloat(src_dtype, src + i * elem), multiplier);
          }
        }
      }
    }
  }
}

}  // namespace ferry
