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
  largest_free_bound_ = std::max<int64_t>(capacity, 0);
  if (capacity > 0) free_[0] = capacity;
}

int64_t FirstFitAllocator::Allocate(int64_t bytes) {
  bytes = Granted(bytes);
  if (bytes > largest_free_bound_) return -1;
  int64_t largest = 0;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    largest = std::max(largest, it->second);
    if (it->second < bytes) continue;
    const int64_t offset = it->first, size = it->second;
    free_.erase(it);
    if (size > bytes) free_[offset + bytes] = size - bytes;
    used_[offset] = bytes;
    in_use_ += bytes;
    return offset;
  }
  largest_free_bound_ = largest;
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
      it = prev;
    }
  }
  largest_free_bound_ = std::max(largest_free_bound_, it->second);
}

namespace {

// The ops in plan order: repeatedly the lowest (round, index) among those whose deps are done.
Result<std::vector<int>> PlanOrder(const RankStagingOps& ops) {
  const std::vector<int>& round = ops.round;
  const size_t n = round.size();
  std::vector<int> waiting(n, 0);
  for (int d : ops.dependents) ++waiting[static_cast<size_t>(d)];
  // (round, index) as one integer, ordered as the pair: round in the high half, index below.
  const auto key = [&](size_t i) {
    return static_cast<int64_t>(round[i]) * (int64_t{1} << 32) + static_cast<int64_t>(i);
  };
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push(key(i));
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = static_cast<int>(ready.top() & 0xFFFFFFFF);
    ready.pop();
    order.push_back(i);
    for (int d : ops.DependentsOf(i)) {
      if (--waiting[static_cast<size_t>(d)] == 0) ready.push(key(static_cast<size_t>(d)));
    }
  }
  if (order.size() != n) {
    return InvalidArgument(std::to_string(n - order.size()) + " ops wait on each other in a cycle");
  }
  return order;
}

}  // namespace

namespace {

// A slot's size (granted) and the positions in plan order of its first and last use.
struct SlotLife {
  int slot;
  int64_t bytes;
  int first, last;
};

// Offsets for `lives` such that slots used at a common position never overlap: largest first,
// each at the lowest offset clear of the placed slots whose lives overlap its own (greedy by
// size, which packs close to the most bytes ever live at once). Quadratic in the slots.
void PlaceBySize(std::vector<SlotLife>& lives, StagingLayout& layout) {
  std::stable_sort(lives.begin(), lives.end(), [](const SlotLife& a, const SlotLife& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  std::vector<std::pair<int64_t, int64_t>> placed_ranges;  // (offset, end) by index in `lives`
  std::vector<std::pair<int64_t, int64_t>> clash;
  for (size_t i = 0; i < lives.size(); ++i) {
    clash.clear();
    for (size_t j = 0; j < i; ++j) {
      if (lives[j].first <= lives[i].last && lives[i].first <= lives[j].last) clash.push_back(placed_ranges[j]);
    }
    std::sort(clash.begin(), clash.end());
    int64_t at = 0;
    for (const auto& [begin, end] : clash) {
      if (begin - at >= lives[i].bytes) break;
      at = std::max(at, end);
    }
    placed_ranges.emplace_back(at, at + lives[i].bytes);
    layout.offset[lives[i].slot] = at;
    layout.extent = std::max(layout.extent, at + lives[i].bytes);
  }
}

// Offsets for `lives` as a first-fit allocator gives them, slots taken and freed in plan order.
void PlaceFirstFit(const std::vector<SlotLife>& lives, int positions, StagingLayout& layout) {
  std::vector<std::vector<int>> starting(static_cast<size_t>(positions)), ending(static_cast<size_t>(positions));
  int64_t total = 0;
  for (size_t i = 0; i < lives.size(); ++i) {
    starting[static_cast<size_t>(lives[i].first)].push_back(static_cast<int>(i));
    ending[static_cast<size_t>(lives[i].last)].push_back(static_cast<int>(i));
    total += lives[i].bytes;
  }
  FirstFitAllocator allocator;
  allocator.Reset(total);  // room for every slot at once: first fit never fails
  for (int t = 0; t < positions; ++t) {
    for (int i : starting[static_cast<size_t>(t)]) {
      const int64_t at = allocator.Allocate(lives[static_cast<size_t>(i)].bytes);
      layout.offset[lives[static_cast<size_t>(i)].slot] = at;
      layout.extent = std::max(layout.extent, at + lives[static_cast<size_t>(i)].bytes);
    }
    for (int i : ending[static_cast<size_t>(t)]) allocator.Free(layout.offset.at(lives[static_cast<size_t>(i)].slot));
  }
}

// The most bytes of slots live at one position: no layout has a smaller extent.
int64_t PeakLiveBytes(const std::vector<SlotLife>& lives, int positions) {
  std::vector<int64_t> change(static_cast<size_t>(positions) + 1, 0);
  for (const SlotLife& l : lives) {
    change[static_cast<size_t>(l.first)] += l.bytes;
    change[static_cast<size_t>(l.last) + 1] -= l.bytes;
  }
  int64_t live = 0, peak = 0;
  for (int64_t c : change) peak = std::max(peak, live += c);
  return peak;
}

constexpr size_t kMostSlotsPlacedBySize = 20000;

}  // namespace

Result<StagingLayout> LayOutStagingInPlanOrder(const std::vector<int>& round,
                                               const std::vector<std::vector<int>>& dependents,
                                               const std::vector<std::vector<int>>& slots,
                                               const std::function<int64_t(int)>& slot_bytes) {
  RankStagingOps ops;
  ops.round = round;
  const auto flatten = [](const std::vector<std::vector<int>>& lists, std::vector<int>& begin, std::vector<int>& all) {
    begin.reserve(lists.size() + 1);
    begin.push_back(0);
    for (const std::vector<int>& list : lists) {
      all.insert(all.end(), list.begin(), list.end());
      begin.push_back(static_cast<int>(all.size()));
    }
  };
  flatten(dependents, ops.dependents_begin, ops.dependents);
  flatten(slots, ops.slots_begin, ops.slots);
  return LayOutStagingInPlanOrder(ops, slot_bytes);
}

Result<StagingLayout> LayOutStagingInPlanOrder(const RankStagingOps& ops,
                                               const std::function<int64_t(int)>& slot_bytes) {
  StagingLayout layout;
  FERRY_ASSIGN_OR_RETURN(layout.order, PlanOrder(ops));
  std::unordered_map<int, size_t> life_of;  // slot -> index in lives
  std::vector<SlotLife> lives;
  for (size_t t = 0; t < layout.order.size(); ++t) {
    for (int s : ops.SlotsOf(layout.order[t])) {
      auto [it, added] = life_of.emplace(s, lives.size());
      if (added) lives.push_back({s, FirstFitAllocator::Granted(slot_bytes(s)), static_cast<int>(t), 0});
      lives[it->second].last = static_cast<int>(t);
    }
  }
  const int positions = static_cast<int>(layout.order.size());
  PlaceFirstFit(lives, positions, layout);
  if (layout.extent <= PeakLiveBytes(lives, positions) || lives.size() > kMostSlotsPlacedBySize) return layout;
  StagingLayout by_size;
  by_size.order = std::move(layout.order);
  PlaceBySize(lives, by_size);
  return by_size;
}

Result<StagingLayout> StagingLayoutCache::LayOut(const std::vector<int>& round,
                                                 const std::vector<std::vector<int>>& dependents,
                                                 const std::vector<std::vector<int>>& slots,
                                                 const std::function<int64_t(int)>& slot_bytes) {
  std::vector<int64_t> bytes;
  for (const std::vector<int>& used : slots) {
    for (int s : used) bytes.push_back(slot_bytes(s));
  }
  if (valid_ && round == round_ && dependents == dependents_ && slots == slots_ && bytes == bytes_) {
    return layout_;
  }
  valid_ = false;
  FERRY_ASSIGN_OR_RETURN(layout_, LayOutStagingInPlanOrder(round, dependents, slots, slot_bytes));
  round_ = round;
  dependents_ = dependents;
  slots_ = slots;
  bytes_ = std::move(bytes);
  valid_ = true;
  return layout_;
}

namespace {

// Adds `buffer` to `slots` when `space` is staging and it is not among slots[first, end) yet;
// false when it is not a slot of `plan`.
bool AddSlot(const TransferPlan& plan, Space space, int buffer, size_t first, std::vector<int>& slots) {
  if (space != Space::kStaging) return true;
  if (buffer < 0 || static_cast<size_t>(buffer) >= plan.slots.size()) return false;
  if (std::find(slots.begin() + first, slots.end(), buffer) == slots.end()) slots.push_back(buffer);
  return true;
}

// Fills `r` (its ids given) for rank `rank`: rounds, the dependents CSR (op j's dependents in
// ascending local index) and the slots CSR (each op's distinct slots in the order it names them).
Status GatherRankStagingOps(const TransferPlan& plan, int rank, const std::vector<int>& local, RankStagingOps& r) {
  const size_t n = r.ids.size();
  r.round.resize(n);
  r.dependents_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[static_cast<size_t>(r.ids[i])];
    r.round[i] = op.round;
    for (int dep : plan.Deps(op)) {
      if (dep < 0 || static_cast<size_t>(dep) >= local.size() || plan.ops[static_cast<size_t>(dep)].rank != rank) {
        return InvalidArgument("op " + std::to_string(op.id) + " depends on op " + std::to_string(dep) +
                               " of another rank");
      }
      ++r.dependents_begin[static_cast<size_t>(local[static_cast<size_t>(dep)]) + 1];
    }
  }
  for (size_t i = 0; i < n; ++i) r.dependents_begin[i + 1] += r.dependents_begin[i];
  r.dependents.resize(static_cast<size_t>(r.dependents_begin[n]));
  std::vector<int> fill(r.dependents_begin.begin(), r.dependents_begin.end() - 1);
  r.slots_begin.reserve(n + 1);
  r.slots_begin.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[static_cast<size_t>(r.ids[i])];
    for (int dep : plan.Deps(op)) {
      int& next = fill[static_cast<size_t>(local[static_cast<size_t>(dep)])];
      r.dependents[static_cast<size_t>(next++)] = static_cast<int>(i);
    }
    const size_t first = r.slots.size();
    bool known = true;
    for (int c = op.copies_begin; c < op.copies_end; ++c) {  // spaces and buffers only, not shapes
      const PairGeometry g = plan.GeometryOf(c);
      const PackedCopy& packed = plan.copies[static_cast<size_t>(c)];
      known &= AddSlot(plan, g.from_space, packed.from_buffer, first, r.slots);
      known &= AddSlot(plan, g.to_space, packed.to_buffer, first, r.slots);
    }
    if (IsMessageKind(op.kind)) known &= AddSlot(plan, op.data.space, op.data.buffer, first, r.slots);
    if (!known) return InvalidArgument("op " + std::to_string(op.id) + " uses a staging slot the plan lacks");
    r.slots_begin.push_back(static_cast<int>(r.slots.size()));
  }
  return Status::Ok();
}

}  // namespace

// Ops are indexed by id (Op::id); a rank's local indices follow plan order, so one counting pass
// sizes every rank and one array gives each op its local index, without a table per rank.
Result<std::vector<RankStagingOps>> StagingOpsByRank(const TransferPlan& plan) {
  std::vector<RankStagingOps> ranks(static_cast<size_t>(std::max(plan.num_ranks, 0)));
  std::vector<int> count(ranks.size(), 0);
  for (const Op& op : plan.ops) {
    if (op.rank < 0) return InvalidArgument("op " + std::to_string(op.id) + " has a negative rank");
    if (static_cast<size_t>(op.rank) >= count.size()) count.resize(static_cast<size_t>(op.rank) + 1, 0);
    ++count[static_cast<size_t>(op.rank)];
  }
  ranks.resize(count.size());
  for (size_t rank = 0; rank < ranks.size(); ++rank) ranks[rank].ids.reserve(static_cast<size_t>(count[rank]));
  std::vector<int> local(plan.ops.size());  // by op id: its index on its rank
  for (size_t id = 0; id < plan.ops.size(); ++id) {
    std::vector<int>& ids = ranks[static_cast<size_t>(plan.ops[id].rank)].ids;
    local[id] = static_cast<int>(ids.size());
    ids.push_back(plan.ops[id].id);
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    FERRY_RETURN_IF_ERROR(GatherRankStagingOps(plan, static_cast<int>(rank), local, ranks[rank]));
  }
  return ranks;
}

Result<int64_t> PlanOrderStagingBytes(const TransferPlan& plan) {
  FERRY_ASSIGN_OR_RETURN(const std::vector<RankStagingOps> ranks, StagingOpsByRank(plan));
  const auto bytes = [&](int s) { return plan.slots[static_cast<size_t>(s)].bytes; };
  int64_t most = 0;
  for (const RankStagingOps& r : ranks) {
    FERRY_ASSIGN_OR_RETURN(StagingLayout layout, LayOutStagingInPlanOrder(r, bytes));
    most = std::max(most, layout.extent);
  }
  return most;
}

}  // namespace ferry
