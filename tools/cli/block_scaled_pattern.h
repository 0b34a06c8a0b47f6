// The refit test pattern (refit_pattern.h) of block-scaled fp8 destinations
// (Layout::block_scaled): the source holds FinitePatternWord (pattern_word.h) for every tensor
// the destination stores block-scaled, and each block-scaled buffer must then hold what the CPU
// reference (core/base/fp8_block.h) makes of the source's values at their places in the rank's
// matrices: the fp8 values and, in the buffer's scale buffer, every scale_inv, compared bit for
// bit.
//
// Pure functions over caller-owned host memory; thread-safe for disjoint buffers.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::cli {

// Names of the tensors with fragments in `destination`'s block-scaled buffers.
std::unordered_set<std::string> BlockScaledTensors(const Layout& destination);

// Checks every block-scaled buffer of `layout` on `rank` (`buffers[b]` points at buffer b's bytes
// when it lives on `rank`) and its scales against the reference quantization of the pattern the
// source tensors of those names hold (their dtype from `source`). Returns the bytes checked, or
// Internal naming the rank, buffer, matrix and element (or scale block) of the first mismatch and
// how many differ (the first buffer in layout order that has one). Blocks; checks buffers on up
// to 8 threads of its own, fewer where their reference images would pass 4 GiB together.
Result<int64_t> VerifyBlockScaled(const Layout& layout, int rank, const std::vector<char*>& buffers,
                                  const Layout& source);

}  // namespace ferry::cli
