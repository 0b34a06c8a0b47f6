// The per-element term of ferry's fragment checksums: a fragment's checksum is the wrapping 64-bit
// sum, over its elements in row-major order of its box, of BoxChecksumTerm(k, v), where k is the
// element's index in that order and v its bytes read as a little-endian unsigned integer (1, 2, 4
// or 8 bytes, zero-extended). A sum does not depend on the order it is added in, so a GPU kernel
// (core/cuda/box_checksum.cu compiles this header) and a CPU loop give the same bits.
//
// For a fixed k the term is a bijection of v (an xor with a constant, then the splitmix64
// finaliser, itself a bijection), so one wrong element always changes the sum; a misplaced element
// changes it too, because its index is part of its term.
//
// Plain functions, callable from host and device code (FERRY_HD). Thread-safe.
#pragma once

#include <cstdint>

#ifndef FERRY_HD
#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif
#endif

namespace ferry {

FERRY_HD inline uint64_t BoxChecksumTerm(uint64_t index, uint64_t value) {
  uint64_t x = value ^ ((index + 1) * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace ferry
