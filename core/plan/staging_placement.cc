// Placing a run's staging slots in the arena (see staging_placement.h).
#include "core/plan/staging_placement.h"

#include <string>
#include <utility>

#include "core/base/strings.h"

namespace ferry {

void StagingPlacement::ForgetSlots() {
  tight_ = false;
  fixed_ = false;
  fixed_offset_.clear();
  fixed_held_.clear();
  fixed_bytes_ = 0;
  layout_ = StagingLayout{};
  offset_.clear();
  in_order_.clear();
  held_.clear();
  in_order_bytes_ = 0;
}

void StagingPlacement::ResetLoose(int64_t capacity) {
  ForgetSlots();
  spare_.Reset(capacity);
}

void StagingPlacement::ResetFixed(std::unordered_map<int, int64_t> offsets) {
  ForgetSlots();
  spare_.Reset(0);
  fixed_ = true;
  fixed_offset_ = std::move(offsets);
}

void StagingPlacement::ResetTight(StagingLayout layout, int64_t capacity) {
  ResetLoose(capacity - layout.extent);
  layout_ = std::move(layout);
  tight_ = true;
}

bool StagingPlacement::Place(std::span<const int> slots, bool in_order,
                             const std::function<int64_t(int)>& slot_bytes) {
  std::vector<int> missing;
  for (int slot : slots) {
    if (!Placed(slot)) missing.push_back(slot);
  }
  if (missing.empty()) return true;
  if (fixed_) return PlaceFixed(missing, slot_bytes);
  return tight_ && in_order ? PlaceInOrder(missing, slot_bytes) : PlaceFirstFit(missing, slot_bytes);
}

// A slot without a fixed offset is never placed (the caller laid out every slot of its run).
bool StagingPlacement::PlaceFixed(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes) {
  for (int slot : missing) {
    if (fixed_offset_.count(slot) == 0) return false;
  }
  for (int slot : missing) {
    const int64_t bytes = FirstFitAllocator::Granted(slot_bytes(slot));
    offset_[slot] = fixed_offset_.at(slot);
    fixed_held_[slot] = bytes;
    fixed_bytes_ += bytes;
  }
  return true;
}

bool StagingPlacement::PlaceInOrder(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes) {
  for (int slot : missing) {
    const int64_t begin = layout_.offset.at(slot);
    if (OverlapsHeld(begin, begin + FirstFitAllocator::Granted(slot_bytes(slot)))) return false;
  }
  for (int slot : missing) {
    const int64_t begin = layout_.offset.at(slot), bytes = FirstFitAllocator::Granted(slot_bytes(slot));
    held_[begin] = begin + bytes;
    offset_[slot] = begin;
    in_order_.insert(slot);
    in_order_bytes_ += bytes;
  }
  return true;
}

bool StagingPlacement::PlaceFirstFit(const std::vector<int>& missing, const std::function<int64_t(int)>& slot_bytes) {
  const int64_t base = tight_ ? layout_.extent : 0;
  std::vector<int> placed;
  for (int slot : missing) {
    const int64_t at = spare_.Allocate(slot_bytes(slot));
    if (at < 0) {
      for (int s : placed) Release(s);
      return false;
    }
    offset_[slot] = base + at;
    placed.push_back(slot);
  }
  return true;
}

bool StagingPlacement::OverlapsHeld(int64_t begin, int64_t end) const {
  auto it = held_.lower_bound(end);  // the first range starting at or after `end` cannot overlap
  if (it == held_.begin()) return false;
  return std::prev(it)->second > begin;  // ranges are disjoint: only the last one before may
}

void StagingPlacement::Release(int slot) {
  const int64_t at = offset_.at(slot);
  offset_.erase(slot);
  if (fixed_) {
    fixed_bytes_ -= fixed_held_.at(slot);
    fixed_held_.erase(slot);
    return;
  }
  if (in_order_.erase(slot) != 0) {
    in_order_bytes_ -= held_.at(at) - at;
    held_.erase(at);
    return;
  }
  spare_.Free(at - (tight_ ? layout_.extent : 0));
}

int64_t StagingPlacement::OffsetOf(int slot) const {
  auto it = offset_.find(slot);
  return it == offset_.end() ? -1 : it->second;
}

Result<std::optional<StagingLayout>> ChooseStagingLayout(
    int rank, int64_t granted_total, int64_t budget,
    const std::function<Result<StagingLayout>()>& lay_out) {
  if (granted_total <= budget) return std::optional<StagingLayout>();
  FERRY_ASSIGN_OR_RETURN(StagingLayout layout, lay_out());
  if (layout.extent > budget) {
    return InvalidArgument("rank " + std::to_string(rank) + " needs " + FormatBytesExactly(layout.extent) +
                           " of staging for its slots as its ops take them in plan order (256-byte "
                           "units; `ferry plan` prints the plan's need), more than "
                           "executor.staging_budget (" + FormatBytesExactly(budget) + ")");
  }
  return std::optional<StagingLayout>(std::move(layout));
}

}  // namespace ferry
