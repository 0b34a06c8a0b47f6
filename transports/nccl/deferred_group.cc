// DeferredGroup: see deferred_group.h.
#include "transports/nccl/deferred_group.h"

#include <algorithm>
#include <utility>

namespace ferry {

std::vector<DeferredOp> DeferredGroup::Take() {
  std::vector<DeferredOp> ops = std::move(ops_);
  ops_.clear();
  std::stable_sort(ops.begin(), ops.end(), [](const DeferredOp& a, const DeferredOp& b) {
    return a.peer != b.peer ? a.peer < b.peer : a.tag < b.tag;
  });
  return ops;
}

}  // namespace ferry
