// The checksums a refit test pattern gives fragments, computed on the GPU: what `ferry run
// --memory cuda --verify` compares the destinations' checksums with, so that neither side of the
// check walks the model on the host. PatternChecksums (refit_pattern.h) is its CPU reference.
//
// Plain C++ header (no CUDA types). Blocking; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/element_fn.h"
#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cli {

// One fragment of one tensor, as the pattern sees it: its elements in row-major order of the box
// have global indexes first_index + sum(i[d] * index_strides[d]) over the box's coordinates i.
struct PatternBox {
  uint64_t seed = 0;       // PatternSeed of the tensor
  DType from = DType::kBF16;  // the dtype the source holds the pattern in
  DType to = DType::kBF16;    // the fragment's (stored) dtype
  ElementFn fn = ElementFn::kNone;  // what the destination stores of the pattern
  int ndim = 1;
  int64_t first_index = 0;
  std::array<int64_t, cuda::kMaxCopyDims> shape{};
  std::array<int64_t, cuda::kMaxCopyDims> index_strides{};
};

// The checksum (core/base/checksum_term.h) of each box holding the pattern, in order, by one
// kernel launch on the current device's default stream. InvalidArgument names a box that is not
// valid (dims, negative extents, a conversion the kernels lack).
Result<std::vector<uint64_t>> PatternBoxChecksums(const std::vector<PatternBox>& boxes);

}  // namespace ferry::cli
