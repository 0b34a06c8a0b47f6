// Layout validation: every kind of bad input is rejected with a message naming the tensor, the ranks
// and the region. See docs/layout-format.md for the rules.
#pragma once

#include <optional>
#include <set>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry {

struct ValidateOptions {
  // Ranks that exist (from the topology or the launcher); unset = any non-negative rank.
  std::optional<std::set<int>> known_ranks;
  // Require every element of every tensor to be covered by a fragment or declared padding.
  bool require_full_coverage = true;
};

// Checks: dims 1..8 and positive shape; box within the tensor's shape; strides > 0; fragment inside
// its buffer and on the buffer's rank; two fragments on one rank overlapping in memory; coverage;
// unknown ranks. Returns the first error found (deterministic order).
Status ValidateLayout(const Layout& layout, const ValidateOptions& options = {});

// Source and destination agree on every destination tensor: present in the source with the same
// shape and dtype.
Status CheckCompatible(const Layout& source, const Layout& destination);

}  // namespace ferry
