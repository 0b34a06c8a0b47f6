// Twin buffers into staging slots (planner/twin_slots.h).
#include "planner/twin_slots.h"

#include <algorithm>

namespace ferry {
namespace {

// A place in a twin as its staging slot: true (with `twin` set) when it was one.
bool ToSlot(Space& space, int& buffer, size_t first_twin, const std::vector<int>& slot_of_twin,
            size_t& twin) {
  if (space != Space::kDestination || static_cast<size_t>(buffer) < first_twin) return false;
  twin = static_cast<size_t>(buffer) - first_twin;
  space = Space::kStaging;
  buffer = slot_of_twin[twin];
  return true;
}

}  // namespace

std::vector<std::vector<int>> TwinsToSlots(TransferPlan& plan, size_t first_twin,
                                           const std::vector<int>& slot_of_twin) {
  std::vector<std::vector<int>> users(slot_of_twin.size());
  const int num_ops = static_cast<int>(plan.ops.size());
  size_t twin = 0;
  for (int id = 0; id < num_ops; ++id) {
    Op& op = plan.ops[static_cast<size_t>(id)];
    if (ToSlot(op.data.space, op.data.buffer, first_twin, slot_of_twin, twin)) users[twin].push_back(id);
    bool touches = false;
    for (int j = op.copies_begin; j < op.copies_end && !touches; ++j) {
      const PairGeometry g = plan.GeometryOf(j);
      touches = (g.to_space == Space::kDestination && static_cast<size_t>(plan.copies[j].to_buffer) >= first_twin) ||
                (g.from_space == Space::kDestination && static_cast<size_t>(plan.copies[j].from_buffer) >= first_twin);
    }
    if (!touches) continue;
    std::vector<CopyPair> pairs(plan.Copies(op).begin(), plan.Copies(op).end());
    for (CopyPair& c : pairs) {
      for (Region* r : {&c.from, &c.to}) {
        if (ToSlot(r->space, r->buffer, first_twin, slot_of_twin, twin)) users[twin].push_back(id);
      }
    }
    plan.SetCopies(id, pairs);
  }
  for (std::vector<int>& ids : users) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return users;
}

}  // namespace ferry
