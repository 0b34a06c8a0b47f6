// Synthetic reshard-shaped plans for exercising the simulator at scale without the planner: every
// source rank sends `bytes_per_pair` to each destination rank of its rotation, in chunks, one
// chunk after another per source rank (as the planner's rounds do), and every receive is unpacked.
#pragma once

#include <cstdint>

#include "core/plan/plan.h"

namespace ferry::sim {

struct SyntheticShape {
  int sources = 256;
  int destinations = 256;
  int fan = 32;                      // destinations each source sends to
  int64_t bytes_per_pair = 1 << 30;  // bytes from one source to one destination
  int64_t chunk_bytes = 32 << 20;
};

// Sources are ranks 0..sources-1, destinations follow them.
TransferPlan SyntheticReshardPlan(const SyntheticShape& shape);

}  // namespace ferry::sim
