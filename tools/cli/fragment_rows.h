// ForEachRow: the innermost rows of a fragment with their global element indexes and byte
// offsets, the walk that the refit test pattern (refit_pattern.h, block_scaled_pattern.h) fills
// and checks by. Header-only; pure.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout/layout.h"

namespace ferry::cli {

// Calls row(global_index_of_first, byte_offset_of_first, count, byte_stride) for every innermost
// row of `f`, whose elements are stored `esize` bytes each (the tensor's dtype, or the stored
// dtype of a tensor stored transformed: StoredDTypes), where the row's elements have consecutive
// global indexes.
template <typename RowFn>
inline void ForEachRow(const Layout& layout, const Fragment& f, int64_t esize, RowFn&& row) {
  const TensorSpec& t = layout.tensors[f.tensor];
  const int ndim = static_cast<int>(t.shape.size());
  std::vector<int64_t> global_stride(ndim, 1);
  for (int d = ndim - 2; d >= 0; --d) global_stride[d] = global_stride[d + 1] * t.shape[d + 1];
  const int last = ndim - 1;
  const int64_t count = f.box.hi[last] - f.box.lo[last];
  if (count <= 0) return;
  std::vector<int64_t> idx(ndim);
  for (int d = 0; d < ndim; ++d) {
    idx[d] = f.box.lo[d];
    if (f.box.hi[d] <= f.box.lo[d]) return;
  }
  while (true) {
    int64_t global = 0, offset = f.loc.byte_offset;
    for (int d = 0; d < ndim; ++d) {
      global += idx[d] * global_stride[d];
      offset += (idx[d] - f.box.lo[d]) * f.loc.strides[d] * esize;
    }
    row(global, offset, count, f.loc.strides[last] * esize);
    int d = last - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < f.box.hi[d]) break;
      idx[d] = f.box.lo[d];
    }
    if (d < 0) return;
  }
}

}  // namespace ferry::cli
