// Prefetching of tensor specs for the planner's passes over tensor names (intersection, stack
// folding): internal to planner/.
#pragma once

#include <cstddef>
#include <vector>

#include "core/layout/layout.h"

namespace ferry {

// Tensor names and shapes live in separate heap blocks: fetching those of a tensor a few places
// ahead keeps several misses in flight instead of waiting for each (and the specs themselves twice
// as far ahead). A pass over tensor t calls PrefetchNameAndShape(tensors, t + kPrefetchAhead).
inline constexpr size_t kPrefetchAhead = 32;

inline void PrefetchNameAndShape(const std::vector<TensorSpec>& tensors, size_t t) {
  if (t + kPrefetchAhead < tensors.size()) __builtin_prefetch(&tensors[t + kPrefetchAhead]);
  if (t < tensors.size()) {
    __builtin_prefetch(tensors[t].name.data());
    __builtin_prefetch(tensors[t].shape.data());
  }
}

}  // namespace ferry
