// What Refit::RunRest exchanges and plans: each rank's complete destination tensors as the store
// carries them (int32 values in this host's byte order; every rank of a job runs one build on one
// architecture), checked when read back, and the destination layout without them.
//
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/runtime/store.h"

namespace ferry {

// `tensors` (ascending indices) as store bytes.
Bytes EncodeTensorList(const std::vector<int>& tensors);

// Rank `rank`'s list from the store, untrusted: whole int32 values, ascending, each a tensor index
// below `num_tensors`; InvalidArgument naming the rank and the entry otherwise.
Result<std::vector<int>> DecodeTensorList(const Bytes& bytes, int num_tensors, int rank);

// `destination` without the fragments of each rank's complete tensors (`complete[rank]`,
// ascending). Buffers and tensors stay, so buffer indices, and the memory registered by them, are
// those of `destination`.
Layout WithoutCompleteFragments(const Layout& destination,
                                const std::vector<std::vector<int>>& complete);

}  // namespace ferry
