// The first-fit allocator and the plan-order staging layout (see staging_layout.h).
#include "core/plan/staging_layout.h"

#include <queue>
#include <string>
#include <utility>

namespace ferry {

void FirstFitAllocator::Reset(int64_t capacity) {
  free_.clear();
  used_.clear();
  in_use_ = 0;
  if (capacity > 0) free_[0] = capacity;
}

int64_t FirstFitAllocator::Allocate(int64_t bytes) {
  bytes = Granted(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const int64_t offset = it->first, size = it->second;
    free_.erase(it);
    if (size > bytes) free_[offset + bytes] = size - bytes;
    used_[offset] = bytes;
    in_use_ += bytes;
    return offset;
  }
  return -1;
}

void FirstFitAllocator::Free(int64_t offset) {
  const int64_t bytes = used_.at(offset);
  used_.erase(offset);
  in_use_ -= bytes;
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

namespace {

// The ops in plan order: repeatedly the lowest (round, index) among those whose deps are done.
Result<std::vector<int>> PlanOrder(const std::vector<int>& round, const std::vector<std::vector<int>>& dependents) {
  const size_t n = round.size();
  std::vector<int> waiting(n, 0);
  for (const std::vector<int>& after : dependents) {
    for (int d : after) ++waiting[static_cast<size_t>(d)];
  }
  using Key = std::pair<int, int>;  // (round, index)
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.emplace(round[i], static_cast<int>(i));
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int d : dependents[static_cast<size_t>(i)]) {
      if (--waiting[static_cast<size_t>(d)] == 0) ready.emplace(round[static_cast<size_t>(d)], d);
    }
  }
  if (order.size() != n) {
    return InvalidArgument(std::to_string(n - order.size()) + " ops wait on each other in a cycle");
  }
  return order;
}

}  // namespace

Result<StagingLayout> LayOutStagingInPlanOrder(const std::vector<int>& round,
                                               const std::vector<std::vector<int>>& dependents,
                                               const std::vector<std::vector<int>>& slots,
                                               const std::function<int64_t(int)>& slot_bytes) {
  StagingLayout layout;
  FERRY_ASSIGN_OR_RETURN(layout.order, PlanOrder(round, dependents));
  std::unordered_map<int, int> uses;  // slot -> ops still to use it
  int64_t total = 0;
  for (const std::vector<int>& used : slots) {
    for (int s : used) {
      if (uses[s]++ == 0) total += FirstFitAllocator::Granted(slot_bytes(s));
    }
  }
  FirstFitAllocator allocator;
  allocator.Reset(total);  // room for every slot at once: first fit never fails
  for (int i : layout.order) {
    for (int s : slots[static_cast<size_t>(i)]) {
      if (layout.offset.count(s) != 0) continue;
      const int64_t at = allocator.Allocate(slot_bytes(s));
      layout.offset[s] = at;
      layout.extent = std::max(layout.extent, at + FirstFitAllocator::Granted(slot_bytes(s)));
    }
    for (int s : slots[static_cast<size_t>(i)]) {
      if (--uses[s] == 0) allocator.Free(layout.offset.at(s));
    }
  }
  return layout;
}

namespace {

// Adds `buffer` to `slots` when `space` is staging and it is not there yet; false when it is not
// a slot of `plan`.
bool AddSlot(const TransferPlan& plan, Space space, int buffer, std::vector<int>& slots) {
  if (space != Space::kStaging) return true;
  if (buffer < 0 || static_cast<size_t>(buffer) >= plan.slots.size()) return false;
  if (std::find(slots.begin(), slots.end(), buffer) == slots.end()) slots.push_back(buffer);
  return true;
}

bool IsMessage(OpKind kind) { return kind == OpKind::kSend || kind == OpKind::kForward || kind == OpKind::kRecv; }

}  // namespace

Result<int64_t> PlanOrderStagingBytes(const TransferPlan& plan) {
  std::vector<std::vector<int>> ops_of_rank;
  for (const Op& op : plan.ops) {
    if (op.rank < 0) return InvalidArgument("op " + std::to_string(op.id) + " has a negative rank");
    if (static_cast<size_t>(op.rank) >= ops_of_rank.size()) ops_of_rank.resize(static_cast<size_t>(op.rank) + 1);
    ops_of_rank[static_cast<size_t>(op.rank)].push_back(op.id);
  }
  const auto bytes = [&](int s) { return plan.slots[static_cast<size_t>(s)].bytes; };
  int64_t most = 0;
  for (size_t rank = 0; rank < ops_of_rank.size(); ++rank) {
    const std::vector<int>& ids = ops_of_rank[rank];
    std::unordered_map<int, int> local;
    for (size_t i = 0; i < ids.size(); ++i) local[ids[i]] = static_cast<int>(i);
    std::vector<int> round(ids.size());
    std::vector<std::vector<int>> dependents(ids.size()), slots(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const Op& op = plan.ops[static_cast<size_t>(ids[i])];
      round[i] = op.round;
      for (int dep : plan.Deps(op)) {
        auto it = local.find(dep);
        if (it == local.end()) {
          return InvalidArgument("op " + std::to_string(op.id) + " depends on op " + std::to_string(dep) +
                                 " of another rank");
        }
        dependents[static_cast<size_t>(it->second)].push_back(static_cast<int>(i));
      }
      bool known = true;
      for (const CopyPair& pair : plan.Copies(op)) {
        known &= AddSlot(plan, pair.from.space, pair.from.buffer, slots[i]);
        known &= AddSlot(plan, pair.to.space, pair.to.buffer, slots[i]);
      }
      if (IsMessage(op.kind)) known &= AddSlot(plan, op.data.space, op.data.buffer, slots[i]);
      if (!known) return InvalidArgument("op " + std::to_string(op.id) + " uses a staging slot the plan lacks");
    }
    FERRY_ASSIGN_OR_RETURN(StagingLayout layout, LayOutStagingInPlanOrder(round, dependents, slots, bytes));
    most = std::max(most, layout.extent);
  }
  return most;
}

}  // namespace ferry
