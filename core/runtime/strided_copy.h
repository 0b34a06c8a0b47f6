// Strided copies between Regions (core/plan/plan.h), the work the executor's Copy, Pack, Unpack
// and Convert ops do. A copy is first simplified (unit dims dropped, adjacent dims merged when both
// sides are dense across them) and then split into independent tasks a thread pool runs in
// parallel. Pure functions over caller-owned memory; thread-safe for disjoint destinations.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/element_fn.h"
#include "core/base/status.h"
#include "core/plan/plan.h"

namespace ferry {

// A simplified copy: `rows` rows of `run` elements each. Row r's element j is at
//   from + offset_of(r, from_strides) + j * from_inner,   likewise for `to`.
struct CopyGeometry {
  DType from_dtype = DType::kUInt8;
  DType to_dtype = DType::kUInt8;
  ElementFn fn = ElementFn::kNone;  // applied to each element (core/base/element_fn.h)
  int outer_dims = 0;                      // dims iterated per row
  std::array<int64_t, kMaxDims> extent{};  // outer extents
  std::array<int64_t, kMaxDims> from_stride{};  // bytes
  std::array<int64_t, kMaxDims> to_stride{};    // bytes
  int64_t rows = 0;
  int64_t run = 0;         // elements per row
  int64_t from_inner = 0;  // bytes between elements of a row
  int64_t to_inner = 0;
  // A row is one memcpy.
  bool contiguous_run() const {
    const int64_t size = DTypeSize(from_dtype);
    return from_dtype == to_dtype && fn == ElementFn::kNone &&
           (run <= 1 || (from_inner == size && to_inner == size));
  }
  int64_t bytes() const { return rows * run * DTypeSize(to_dtype); }  // destination bytes written
};

// Validates that `from` and `to` have the same shape (and, with an element function, that it
// applies to their dtypes: ElementFnApplies) and builds the geometry.
Result<CopyGeometry> MakeCopyGeometry(const Region& from, const Region& to,
                                      ElementFn fn = ElementFn::kNone);

// A piece of a copy: rows [row_begin, row_end); when the copy is a single contiguous run split by
// bytes, [byte_begin, byte_end) of that run instead (row_begin = row_end = 0).
struct CopySlice {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t byte_begin = 0;
  int64_t byte_end = 0;
};

// The byte offsets (from the regions' starts) of a copy's rows, one row after another from
// `first_row`: an odometer over the outer dims.
class RowWalker {
 public:
  RowWalker(const CopyGeometry& geometry, int64_t first_row) : g_(geometry) {
    int64_t rest = first_row;
    for (int d = g_.outer_dims - 1; d >= 0; --d) {
      index_[d] = rest % g_.extent[d];
      rest /= g_.extent[d];
      from_ += index_[d] * g_.from_stride[d];
      to_ += index_[d] * g_.to_stride[d];
    }
  }
  int64_t from_offset() const { return from_; }
  int64_t to_offset() const { return to_; }
  void Next() {
    for (int d = g_.outer_dims - 1; d >= 0; --d) {
      ++index_[d];
      from_ += g_.from_stride[d];
      to_ += g_.to_stride[d];
      if (index_[d] < g_.extent[d]) return;
      from_ -= index_[d] * g_.from_stride[d];
      to_ -= index_[d] * g_.to_stride[d];
      index_[d] = 0;
    }
  }

 private:
  const CopyGeometry& g_;
  std::array<int64_t, kMaxDims> index_{};
  int64_t from_ = 0;
  int64_t to_ = 0;
};

// The whole copy as one slice (no allocation; a 0-byte copy gives a slice that copies nothing).
inline CopySlice WholeCopy(const CopyGeometry& geometry) { return {0, geometry.rows, 0, 0}; }

// Splits a copy into about bytes / target_bytes slices (at most max_slices, at least 1).
std::vector<CopySlice> SliceCopy(const CopyGeometry& geometry, int64_t target_bytes, int max_slices);

// Copies (converting dtypes when they differ, applying the geometry's element function) one slice. `from` and `to` point at the regions'
// byte offset 0 (buffer base + Region::offset).
Status RunCopySlice(const CopyGeometry& geometry, const CopySlice& slice, const char* from, char* to);

}  // namespace ferry
