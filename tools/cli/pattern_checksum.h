// The check of the refit test pattern by fragment checksums (core/cuda/box_checksum.h): each
// fragment's checksum, computed where its bytes are (the GPU for `ferry run --memory cuda`), is
// compared with the checksum the pattern gives it, computed from the layout alone (on the GPU by
// PatternBoxChecksums; PatternChecksums is the CPU reference), so verifying a CUDA refit copies
// 16 bytes per fragment to the host instead of the model, and walks no element on the host.
//
// Blocking calls over caller-owned memory; thread-safe for disjoint buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/batched_copy.h"
#include "core/layout/layout.h"
#include "tools/cli/pattern_checksum_gpu.h"
#include "tools/cli/refit_pattern.h"

namespace ferry::cli {

// The box descriptors of the fragments of `layout` held by `buffers.rank`, in layout order, each
// pointing into `buffers` (host or device memory alike): the boxes PatternChecksums sums.
// InvalidArgument for a fragment of more dims than the checksum kernel takes.
Result<std::vector<cuda::StridedCopy>> FragmentBoxes(const Layout& layout, const RankBuffers& buffers);

// The pattern boxes (pattern_checksum_gpu.h) of the fragments of `layout` held by `rank`, in
// layout order; a tensor that `source` holds in another dtype expects its pattern converted.
Result<std::vector<PatternBox>> FragmentPatternBoxes(const Layout& layout, int rank, const Layout* source = nullptr);

// Compares `actual` with `expected` (both one checksum per fragment of `rank`, in layout order).
// Internal names the rank, buffer, tensor and box of the first fragment that differs, both sums,
// and how many of the rank's fragments differ.
Status CompareFragmentChecksums(const Layout& layout, int rank, const std::vector<uint64_t>& expected,
                                const std::vector<uint64_t>& actual);

// The whole check of `layout`'s fragments on `device.rank`, whose buffers are CUDA memory: two
// kernels on the default stream (the fragments' checksums, the pattern's), then the comparison.
// Returns the bytes checked.
Result<int64_t> VerifyPatternOnDevice(const Layout& layout, const RankBuffers& device,
                                      const Layout* source = nullptr);

}  // namespace ferry::cli
