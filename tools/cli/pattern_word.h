// The element values of the refit test pattern (see refit_pattern.h), callable from host and device
// code (FERRY_HD) so that the CPU check and the GPU checksum kernel of tools/cli/pattern_checksum_gpu.cu
// compute the same bits. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/dtype.h"
#include "core/base/element_fn.h"
#include "core/base/float_convert.h"

namespace ferry::cli {

// The seed of the tensor named `tensor_name` (FNV-1a); PatternWord gives its elements.
inline uint64_t PatternSeed(const std::string& tensor_name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : tensor_name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The 64-bit pattern word of element `index` of the tensor whose seed is `seed` (splitmix64).
FERRY_HD inline uint64_t PatternWord(uint64_t seed, int64_t index) {
  uint64_t x = seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The pattern word of an element of a tensor that the destination stores block-scaled
// (Layout::block_scaled): PatternWord with the exponent of its `dtype` element pinned to finite
// normal values (bf16 and fp32 in [2^-15, 2), fp16 in [2^-7, 2); other dtypes as PatternWord),
// since random bits would put an inf or NaN into nearly every 128x128 block and make every scale
// NaN.
FERRY_HD inline uint64_t FinitePatternWord(uint64_t seed, int64_t index, DType dtype) {
  const uint64_t word = PatternWord(seed, index);
  switch (dtype) {
    case DType::kBF16: return (word & ~uint64_t{0x7800}) | 0x3800;  // exponent 0b0111xxxx
    case DType::kFP32: return (word & ~uint64_t{0x78000000}) | 0x38000000;
    case DType::kFP16: return (word & ~uint64_t{0x6000}) | 0x2000;  // exponent 0b01xxx
    default: return word;
  }
}

// The mask of an element of `dtype` in a uint64_t: its DTypeSize low bytes.
inline uint64_t ElementMask(DType dtype) {
  const int64_t size = DTypeSize(dtype);
  return size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
}

// The bytes element `index` holds in a tensor of dtype `to` whose source held the pattern in
// `from`, as a little-endian integer (`mask` is ElementMask(to)): the pattern word's low bytes,
// converted by the CPU reference (core/base/float_convert.h) when the dtypes differ, and with
// `fn` applied (core/base/element_fn.h) for a tensor the destination stores through it (on the
// device with the device's math, as the CUDA convert kernel computes it).
FERRY_HD inline uint64_t PatternElement(uint64_t seed, int64_t index, DType from, DType to, uint64_t mask,
                                        ElementFn fn = ElementFn::kNone) {
  uint64_t word = PatternWord(seed, index);
  if (from != to || fn != ElementFn::kNone) {
    uint64_t converted = 0;
    TransformElement(fn, from, to, reinterpret_cast<const unsigned char*>(&word),
                     reinterpret_cast<unsigned char*>(&converted));
    word = converted;
  }
  return word & mask;
}

}  // namespace ferry::cli
