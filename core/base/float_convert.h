// Element conversions between the floating-point dtypes (bf16, fp16, fp32, fp8 e4m3, fp8 e5m2):
// the CPU reference that the host copies, the CUDA convert kernel (core/cuda/batched_convert.cu
// compiles this same header) and `ferry run --verify` all use, so every path gives the same bits.
//
// Every conversion goes through fp32, which holds every value of the other four exactly, so a
// conversion rounds once:
//   - to fp32: exact.
//   - to bf16 / fp16: IEEE round-to-nearest-even; overflow gives ±inf, NaN stays a quiet NaN
//     (sign kept), subnormals are kept (no flush to zero).
//   - to fp8 e4m3 (OCP "e4m3fn": bias 7, max ±448, no infinities, NaN = S.1111.111): round to
//     nearest even with saturation, as the OCP FP8 spec's saturation mode: finite values beyond
//     ±448 (after rounding) give ±448, ±inf gives ±448, NaN gives NaN (0x7f, sign kept).
//   - to fp8 e5m2 (OCP: bias 15, max ±57344, has infinities): round to nearest even; finite
//     values beyond ±57344 saturate to ±57344, ±inf stays ±inf, NaN gives a quiet NaN (0x7e,
//     sign kept).
// Subnormal results round to nearest even on the subnormal grid; results below half the
// smallest subnormal give ±0.
//
// In device code for GPUs with fp8 conversions (sm_89 on), the casts to fp16 and fp8 are the
// hardware's (cvt.rn, cvt.rn.satfinite), with NaN (and e5m2's infinities) handled before them: they
// give the bits of FloatToSmall, which tests/core/cuda/batched_convert_test.cc checks bit for bit.
//
// Plain functions on bit patterns, callable from host and device code (FERRY_HD). Thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#include "core/base/dtype.h"

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

namespace ferry {

FERRY_HD inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
#endif
}

FERRY_HD inline float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// A small binary float format: `exp_bits` exponent bits, `man_bits` mantissa bits, bias
// 2^(exp_bits-1) - 1, and no infinity/NaN exponent when `finite_only` (e4m3fn: only S.1111.111
// is NaN).
struct SmallFloat {
  int exp_bits;
  int man_bits;
  bool finite_only;
};
inline constexpr SmallFloat kHalfFormat{5, 10, false};
inline constexpr SmallFloat kE4M3Format{4, 3, true};
inline constexpr SmallFloat kE5M2Format{5, 2, false};

// A small float's bits (sign in bit exp_bits + man_bits) as fp32 (exact).
FERRY_HD inline float SmallToFloat(uint32_t bits, SmallFloat fmt) {
  const int width = fmt.exp_bits + fmt.man_bits;
  const uint32_t sign = (bits >> width & 1u) << 31;
  const uint32_t exp_max = (1u << fmt.exp_bits) - 1;
  const int bias = (1 << (fmt.exp_bits - 1)) - 1;
  uint32_t exponent = bits >> fmt.man_bits & exp_max;
  uint32_t mantissa = bits & ((1u << fmt.man_bits) - 1);
  if (fmt.finite_only ? (exponent == exp_max && mantissa == (1u << fmt.man_bits) - 1)
                      : exponent == exp_max) {
    if (fmt.finite_only || mantissa != 0) {
      return BitsToFloat(sign | 0x7fc00000u | (mantissa << (23 - fmt.man_bits)));  // NaN
    }
    return BitsToFloat(sign | 0x7f800000u);  // inf
  }
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    int e = 1 - bias;  // normalise the subnormal
    while ((mantissa & (1u << fmt.man_bits)) == 0) {
      mantissa <<= 1;
      --e;
    }
    mantissa &= (1u << fmt.man_bits) - 1;
    return BitsToFloat(sign | static_cast<uint32_t>(e + 127) << 23 | mantissa << (23 - fmt.man_bits));
  }
  return BitsToFloat(sign | (exponent - bias + 127) << 23 | mantissa << (23 - fmt.man_bits));
}

// SmallToFloat(bits, kE4M3Format); on the host through a table of the 256 codes built from it.
FERRY_HD inline float E4m3ToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return SmallToFloat(bits, kE4M3Format);
#else
  static const struct Table {
    float value[256];
    Table() {
      for (uint32_t c = 0; c < 256; ++c) value[c] = SmallToFloat(c, kE4M3Format);
    }
  } table;
  return table.value[bits & 0xffu];
#endif
}

// fp32 -> a small float, rounded to nearest even. Finite overflow gives ±inf when `saturate` is
// false, else the largest finite value; see the file comment for inf and NaN.
FERRY_HD inline uint32_t FloatToSmall(float f, SmallFloat fmt, bool saturate) {
  const uint32_t bits = FloatBits(f);
  const int width = fmt.exp_bits + fmt.man_bits;
  const uint32_t sign = (bits >> 31) << width;
  const uint32_t abs = bits & 0x7fffffffu;
  const uint32_t exp_max = (1u << fmt.exp_bits) - 1;
  const uint32_t man_mask = (1u << fmt.man_bits) - 1;
  // The largest finite magnitude, the infinity and the quiet NaN, as bits without the sign.
  const uint32_t max_finite = fmt.finite_only ? (exp_max << fmt.man_bits | (man_mask - 1))
                                              : ((exp_max - 1) << fmt.man_bits | man_mask);
  const uint32_t nan = fmt.finite_only ? (exp_max << fmt.man_bits | man_mask)
                                       : (exp_max << fmt.man_bits | 1u << (fmt.man_bits - 1));
  const uint32_t inf = fmt.finite_only ? max_finite : exp_max << fmt.man_bits;
  if (abs > 0x7f800000u) return sign | nan;
  if (abs == 0x7f800000u) return sign | inf;
  const int float_exp = static_cast<int>(abs >> 23);
  if (float_exp == 0) return sign;  // fp32 subnormals are far below every small float's range
  const int bias = (1 << (fmt.exp_bits - 1)) - 1;
  const int exp = float_exp - 127 + bias;  // the target's biased exponent, if normal
  const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  const int shift = 23 - fmt.man_bits + (exp >= 1 ? 0 : 1 - exp);
  if (shift > 24) return sign;  // below half the smallest subnormal
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (q & 1u) != 0)) ++q;
  // Normal: (exp - 1) << man_bits plus q, which holds the implicit bit (a carry moves the
  // exponent up); subnormal: q alone (q == 1 << man_bits is the smallest normal).
  const uint64_t out = (exp >= 1 ? static_cast<uint64_t>(exp - 1) << fmt.man_bits : 0) + q;
  if (out > max_finite) return sign | (saturate ? max_finite : inf);
  return sign | static_cast<uint32_t>(out);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FERRY_HARDWARE_FP8 1
#endif

// fp32 -> fp16 bits (FloatToSmall(f, kHalfFormat, false)).
FERRY_HD inline uint32_t FloatToHalf(float f) {
#if defined(FERRY_HARDWARE_FP8)
  if (f != f) return (FloatBits(f) >> 31) << 15 | 0x7e00u;
  return __half_as_ushort(__float2half_rn(f));
#else
  return FloatToSmall(f, kHalfFormat, false);
#endif
}

// fp32 -> e4m3fn bits, saturating (FloatToSmall(f, kE4M3Format, true)). Without the hardware's
// cast, FloatToSmall specialised: magnitudes from 464 (the tie between 448 and 480, which goes to
// the even 448) up saturate to 448, normal results round the fp32 bits to 3 mantissa bits to
// nearest even (a carry moves the exponent up) and rebias, subnormal ones (below 2^-6) round
// |f| * 2^9 to the nearest even integer, exactly (a power-of-two scaling).
FERRY_HD inline uint32_t FloatToE4m3(float f) {
  const uint32_t bits = FloatBits(f), sign = (bits >> 31) << 7;
#if defined(FERRY_HARDWARE_FP8)
  if (f != f) return sign | 0x7fu;
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#else
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7fu;     // NaN
  if (abs >= 0x43e80000u) return sign | 0x7eu;    // >= 464, inf included: 448
  if (abs >= 0x3c800000u) {                       // >= 2^-6: normal
    const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
    return sign | ((rounded >> 20) - (120u << 3));
  }
  // Subnormal (or zero): the multiple of 2^-9 nearest |f|, ties to even. |f| * 2^9 < 8 is exact;
  // adding and subtracting 2^23 rounds it to an integer in the default rounding mode (nearest
  // even), which is what the CPU reference's integer rounding gives.
  const float scaled = BitsToFloat(abs) * 512.0f;
  const float q = (scaled + 8388608.0f) - 8388608.0f;
  return sign | static_cast<uint32_t>(q);
#endif
}

// fp32 -> e5m2 bits, saturating finite values (FloatToSmall(f, kE5M2Format, true)): the
// hardware's satfinite would also turn ±inf into ±57344, so infinities are handled first.
FERRY_HD inline uint32_t FloatToE5m2(float f) {
#if defined(FERRY_HARDWARE_FP8)
  const uint32_t sign = (FloatBits(f) >> 31) << 7;
  if (f != f) return sign | 0x7eu;
  if ((FloatBits(f) & 0x7fffffffu) == 0x7f800000u) return sign | 0x7cu;
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
#else
  return FloatToSmall(f, kE5M2Format, true);
#endif
}

// Two fp32 -> e4m3fn bits, `lo` in the low byte: FloatToE4m3 of each, by one hardware conversion
// of the pair where there is one (its NaN carries no sign, so NaNs are set afterwards).
FERRY_HD inline uint32_t FloatPairToE4m3(float lo, float hi) {
#if defined(FERRY_HARDWARE_FP8)
  uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
  if (lo != lo) pair = (pair & 0xff00u) | FloatToE4m3(lo);
  if (hi != hi) pair = (pair & 0x00ffu) | FloatToE4m3(hi) << 8;
  return pair;
#else
  return FloatToE4m3(lo) | FloatToE4m3(hi) << 8;
#endif
}

// Two fp32 -> e5m2 bits, `lo` in the low byte: FloatToE5m2 of each, by one hardware conversion of
// the pair where there is one (NaNs and infinities set afterwards, as FloatToE5m2 handles them).
FERRY_HD inline uint32_t FloatPairToE5m2(float lo, float hi) {
#if defined(FERRY_HARDWARE_FP8)
  uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E5M2);
  if ((FloatBits(lo) & 0x7f800000u) == 0x7f800000u) pair = (pair & 0xff00u) | FloatToE5m2(lo);
  if ((FloatBits(hi) & 0x7f800000u) == 0x7f800000u) pair = (pair & 0x00ffu) | FloatToE5m2(hi) << 8;
  return pair;
#else
  return FloatToE5m2(lo) | FloatToE5m2(hi) << 8;
#endif
}
#undef FERRY_HARDWARE_FP8

FERRY_HD inline float BF16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

FERRY_HD inline uint16_t FloatToBF16(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// True for the dtypes this header converts between.
FERRY_HD inline bool IsConvertibleFloat(DType d) {
  return d == DType::kBF16 || d == DType::kFP16 || d == DType::kFP32 || d == DType::kFP8E4M3 ||
         d == DType::kFP8E5M2;
}

// Bytes of one element of `d` (IsConvertibleFloat); DTypeSize for device code.
FERRY_HD constexpr int FloatBytes(DType d) {
  return d == DType::kFP32 ? 4 : (d == DType::kBF16 || d == DType::kFP16) ? 2 : 1;
}

// One element of dtype `d` (IsConvertibleFloat), its bits in the low FloatBytes(d) bytes of
// `bits`, as fp32.
FERRY_HD inline float BitsAsFloat(DType d, uint32_t bits) {
  switch (d) {
    case DType::kBF16: return BF16ToFloat(static_cast<uint16_t>(bits));
    case DType::kFP16: return SmallToFloat(bits, kHalfFormat);
    case DType::kFP8E4M3: return SmallToFloat(bits, kE4M3Format);
    case DType::kFP8E5M2: return SmallToFloat(bits, kE5M2Format);
    default: return BitsToFloat(bits);
  }
}

// `v` as the bits of one element of dtype `d` (IsConvertibleFloat), in the low FloatBytes(d) bytes.
FERRY_HD inline uint32_t FloatAsBits(DType d, float v) {
  switch (d) {
    case DType::kBF16: return FloatToBF16(v);
    case DType::kFP16: return FloatToHalf(v);
    case DType::kFP8E4M3: return FloatToE4m3(v);
    case DType::kFP8E5M2: return FloatToE5m2(v);
    default: return FloatBits(v);
  }
}

// One element of dtype `d` (IsConvertibleFloat) at `p` (any alignment) as fp32.
FERRY_HD inline float LoadAsFloat(DType d, const unsigned char* p) {
  uint32_t bits = 0;
  for (int i = FloatBytes(d) - 1; i >= 0; --i) bits = bits << 8 | p[i];  // little-endian
  return BitsAsFloat(d, bits);
}

// LoadAsFloat for a dtype known at compile time, so that the byte loop and the dtype switch fold
// into one load and its conversion.
template <DType kD>
FERRY_HD inline float LoadAsFloatOf(const unsigned char* p) {
  uint32_t bits = 0;
  for (int i = FloatBytes(kD) - 1; i >= 0; --i) bits = bits << 8 | p[i];  // little-endian
  return BitsAsFloat(kD, bits);
}

// Stores `v` as one element of dtype `d` (IsConvertibleFloat) at `p` (any alignment).
FERRY_HD inline void StoreFromFloat(DType d, unsigned char* p, float v) {
  const uint32_t bits = FloatAsBits(d, v);
  for (int i = 0; i < FloatBytes(d); ++i) p[i] = static_cast<unsigned char>(bits >> (8 * i));
}

// Converts one element `from` -> `to` (both IsConvertibleFloat).
FERRY_HD inline void ConvertElement(DType from, DType to, const unsigned char* src, unsigned char* dst) {
  StoreFromFloat(to, dst, LoadAsFloat(from, src));
}

}  // namespace ferry
