// Box: an n-dimensional half-open region [lo, hi) of a logical tensor, 1 to 8 dims. Stored inline
// (no heap) because the planner creates millions of them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry {

inline constexpr int kMaxDims = 8;

// Elements in the box [lo, hi) of `ndim` dims (arrays of ndim values); 0 for no dims or an empty
// extent. Box::Volume, and FragmentTable's in-place count of a fragment's box.
int64_t BoxVolume(int ndim, const int64_t* lo, const int64_t* hi);

struct Box {
  int ndim = 0;
  std::array<int64_t, kMaxDims> lo{};
  std::array<int64_t, kMaxDims> hi{};

  // The whole tensor: [0, shape).
  static Box FromShape(const std::vector<int64_t>& shape);
  // Validates ndim in [1, 8], equal lengths and lo <= hi.
  static Result<Box> Make(const std::vector<int64_t>& lo, const std::vector<int64_t>& hi);

  int64_t Extent(int dim) const { return hi[dim] - lo[dim]; }
  std::vector<int64_t> Shape() const;
  std::vector<int64_t> Lo() const { return {lo.begin(), lo.begin() + ndim}; }
  std::vector<int64_t> Hi() const { return {hi.begin(), hi.begin() + ndim}; }
  // Number of elements; 0 for an empty box.
  int64_t Volume() const;
  bool Empty() const;
  bool Contains(const Box& other) const;
  // The overlap; an empty box (Volume() == 0) when they do not intersect. Same ndim required.
  Box Intersect(const Box& other) const;
  // Whether Intersect(other) is non-empty, without building it.
  bool Intersects(const Box& other) const {
    if (other.ndim != ndim || ndim == 0) return false;
    for (int d = 0; d < ndim; ++d) {
      if (std::max(lo[d], other.lo[d]) >= std::min(hi[d], other.hi[d])) return false;
    }
    return true;
  }
  // "[0:4, 8:16]" meaning rows 0..3, columns 8..15.
  std::string ToString() const;

  friend bool operator==(const Box& a, const Box& b);
  friend bool operator!=(const Box& a, const Box& b) { return !(a == b); }
  // Lexicographic on (ndim, lo, hi): a total order for deterministic sorting.
  friend bool operator<(const Box& a, const Box& b);
};

}  // namespace ferry
