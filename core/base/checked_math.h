// Saturating int64 arithmetic for sizes computed from untrusted input (layout files, wire
// messages): a result that would overflow is pinned at kSaturated instead, so that a size check
// against a limit (core/layout/limits.h) sees "too big" rather than a wrapped, small or negative
// number. Inputs must be non-negative. Header-only; pure.
#pragma once

#include <cstdint>
#include <limits>

namespace ferry {

inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

inline int64_t SatMul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}

inline int64_t SatAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}

}  // namespace ferry
