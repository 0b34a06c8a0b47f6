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
// UE8M0 scales (Fp8ScaleFormat::kUe8m0 and kUe8m0Packed, core/base/fp8_scale_format.h): what vLLM
// holds after vllm/model_executor/layers/quantization/utils/fp8_utils.py
// requant_weight_ue8m0_inplace ran on the block quantized above (scale_inv s, values q): per block, in fp32,
//   w         = float(q) * s                       (dequantized with the checkpoint's scale)
//   amax'     = max |w| over the block
//   scale_inv = 2^ceil(log2(max(amax', 1e-4f) / 448))   (per_block_cast_to_fp8, use_ue8m0=True)
//   q'        = e4m3fn(w * (1.0f / scale_inv))
// so with kUe8m0 the scale tensor keeps its dtype (fp32) and shape, every value a power of two
// (kUe8m0Packed stores the same scales as DeepGEMM's SM100 codes,
// core/base/fp8_packed_scales.h). ferry rounds
// up exactly (the next exponent when the mantissa is not 0); torch computes pow(2, ceil(log2(x)))
// in fp32, which is the same except for an x a few ulps above a power of two, where an fp32 log2
// may round down to the integer. For a bf16 or fp16 source that never happens: amax' / 448 lies
// within a few ulps of amax / 448, and an amax of at most 11 significant bits over 448 is either
// a power of two exactly or ~2^-11 (relative) away from one; an fp32 source can hit it. amax' is
// float(e4m3fn(amax * multiplier)) * s: the cast and the multiply by s keep the order of |x|.
// A zero block gets 2^-22 (1e-4 / 448 rounded up); a NaN block stays NaN (scale and values); a
// block holding ±inf, whose q are ±0 and NaN with s = inf, dequantizes to NaN everywhere
// (0 * inf), so it becomes a NaN block.
//
// Plain functions (FERRY_HD); thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/base/dtype.h"
#include "core/base/float_convert.h"
#include "core/base/fp8_packed_scales.h"
#include "core/base/fp8_scale_format.h"

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

// The e4m3fn bits of element `x` of a block whose multiplier is `multiplier` (the hardware's cast
// in device code, float_convert.h FloatToE4m3; every NaN as 0x7f).
FERRY_HD inline uint8_t Fp8BlockQuantize(float x, float multiplier) {
  const float v = Fp8BlockMul(x, multiplier);
  if (v != v) return 0x7f;
  return static_cast<uint8_t>(FloatToE4m3(v));
}

// The smallest power of two >= v (v > 0; inf stays inf); NaN gives the canonical NaN.
FERRY_HD inline float Fp8BlockCeilPow2(float v) {
  if (v != v) return BitsToFloat(0x7fc00000u);
  const uint32_t bits = FloatBits(v);
  if ((bits & 0x7fffffu) == 0) return v;
  return BitsToFloat((bits & 0x7f800000u) + 0x800000u);
}

// How the elements of one block are quantized, from its |x| maximum (Fp8BlockParamsOf). No
// member initializers: the CUDA kernel holds one in shared memory.
struct Fp8BlockParams {
  float scale_inv;   // what the scale tensor holds
  float multiplier;  // 1 / the float32 scale_inv: the first quantization
  bool requantize;   // kUe8m0: requantize float(q) * dequant with `requant`
  float dequant, requant;
};

FERRY_HD inline Fp8BlockParams Fp8BlockParamsOf(float amax, Fp8ScaleFormat fmt) {
  Fp8BlockParams p{0.0f, 0.0f, false, 0.0f, 0.0f};
  p.scale_inv = Fp8BlockScaleInv(amax);
  p.multiplier = Fp8BlockMultiplier(p.scale_inv);
  if (!Fp8ScaleIsUe8m0(fmt)) return p;
  const uint8_t qmax = Fp8BlockQuantize(amax, p.multiplier);
  const float amax_dequantized = Fp8BlockMul(E4m3ToFloat(qmax), p.scale_inv);
  p.requantize = true;
  p.dequant = p.scale_inv;
  p.scale_inv = Fp8BlockCeilPow2(Fp8BlockScaleInv(amax_dequantized));
  p.requant = Fp8BlockMultiplier(p.scale_inv);
  return p;
}

// The e4m3fn bits of element `x` of a block quantized with `p`.
FERRY_HD inline uint8_t Fp8BlockQuantizeElement(float x, const Fp8BlockParams& p) {
  const uint8_t q = Fp8BlockQuantize(x, p.multiplier);
  if (!p.requantize) return q;
  return Fp8BlockQuantize(Fp8BlockMul(E4m3ToFloat(q), p.dequant), p.requant);
}

// Row `i` (0..127) of block `k`'s share of writing the block's scale_inv `scale` into `scales`
// (the scales of [rows, cols] matrices, blocks numbered as Fp8BlockQuantizeBlocks numbers them):
// fp32 formats write the fp32 at index k from i == 0; kUe8m0Packed writes the E8M0 code of block
// row k's weight row i (core/base/fp8_packed_scales.h), so a block's 128 calls write it whole.
FERRY_HD inline void Fp8BlockWriteScaleRow(unsigned char* scales, Fp8ScaleFormat fmt, int64_t rows,
                                           int64_t cols, int64_t k, float scale, int64_t i) {
  if (fmt != Fp8ScaleFormat::kUe8m0Packed) {
    if (i == 0) memcpy(scales + k * 4, &scale, 4);
    return;
  }
  const int64_t block_rows = (rows + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t block_cols = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t m = k / (block_rows * block_cols);
  const int64_t row = k / block_cols % block_rows * kFp8BlockSize + i;
  if (row >= Fp8PackedScaleRowStride(rows)) return;
  Fp8PackedScaleWriteRow(scales + m * Fp8PackedScaleMatrixBytes(rows, cols), rows, cols, row,
                         k % block_cols, Fp8PackedScaleCode(scale));
}

// Fp8BlockQuantizeBlocks for a source dtype known at compile time.
template <DType kSrc>
inline void Fp8BlockQuantizeBlocksOf(const unsigned char* src, int64_t rows, int64_t cols,
                                     unsigned char* dst, void* scales, Fp8ScaleFormat fmt,
                                     int64_t first, int64_t end) {
  constexpr int64_t elem = FloatBytes(kSrc);
  const int64_t block_rows = (rows + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t block_cols = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  for (int64_t k = first; k < end; ++k) {
    const int64_t m = k / (block_rows * block_cols);
    const int64_t r0 = k / block_cols % block_rows * kFp8BlockSize;
    const int64_t c0 = k % block_cols * kFp8BlockSize;
    const int64_t r1 = r0 + kFp8BlockSize < rows ? r0 + kFp8BlockSize : rows;
    const int64_t c1 = c0 + kFp8BlockSize < cols ? c0 + kFp8BlockSize : cols;
    const int64_t base = m * rows * cols;
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        amax = Fp8BlockAmaxStep(amax, LoadAsFloatOf<kSrc>(src + (base + r * cols + c) * elem));
      }
    }
    const Fp8BlockParams p = Fp8BlockParamsOf(amax, fmt);
    for (int64_t i = 0; i < kFp8BlockSize; ++i) {
      Fp8BlockWriteScaleRow(static_cast<unsigned char*>(scales), fmt, rows, cols, k, p.scale_inv, i);
    }
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i = base + r * cols + c;
        dst[i] = Fp8BlockQuantizeElement(LoadAsFloatOf<kSrc>(src + i * elem), p);
      }
    }
  }
}

// Quantizes blocks [first, end) of `matrices` dense row-major [rows, cols] matrices of `src_dtype`
// (bf16, fp16 or fp32) at `src` into dense e4m3fn matrices at `dst` and their scale_inv, in
// format `fmt`, at `scales`: dense fp32 [matrices, ceil(rows/128), ceil(cols/128)], or for
// kUe8m0Packed the packed codes (Fp8ScaleMatrixBytes(fmt, rows, cols) bytes a matrix). Blocks are
// numbered in that order (matrix, block row, block column). Host only; blocks are independent,
// so disjoint ranges may run on several threads at once.
inline void Fp8BlockQuantizeBlocks(DType src_dtype, const unsigned char* src, int64_t rows,
                                   int64_t cols, unsigned char* dst, void* scales,
                                   Fp8ScaleFormat fmt, int64_t first, int64_t end) {
  switch (src_dtype) {
    case DType::kBF16:
      return Fp8BlockQuantizeBlocksOf<DType::kBF16>(src, rows, cols, dst, scales, fmt, first, end);
    case DType::kFP16:
      return Fp8BlockQuantizeBlocksOf<DType::kFP16>(src, rows, cols, dst, scales, fmt, first, end);
    default:
      return Fp8BlockQuantizeBlocksOf<DType::kFP32>(src, rows, cols, dst, scales, fmt, first, end);
  }
}

// The number of 128x128 blocks of `matrices` [rows, cols] matrices.
inline int64_t Fp8BlockCount(int64_t matrices, int64_t rows, int64_t cols) {
  return matrices * ((rows + kFp8BlockSize - 1) / kFp8BlockSize) *
         ((cols + kFp8BlockSize - 1) / kFp8BlockSize);
}

// Every block of the matrices (Fp8BlockQuantizeBlocks) on the calling thread: the reference of
// every other path.
inline void Fp8BlockQuantizeMatrices(DType src_dtype, const unsigned char* src, int64_t matrices,
                                     int64_t rows, int64_t cols, unsigned char* dst, void* scales,
                                     Fp8ScaleFormat fmt = Fp8ScaleFormat::kFloat32) {
  Fp8BlockQuantizeBlocks(src_dtype, src, rows, cols, dst, scales, fmt, 0,
                         Fp8BlockCount(matrices, rows, cols));
}

}  // namespace ferry
