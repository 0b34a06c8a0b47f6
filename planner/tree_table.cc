// TreeTable: interning delivery trees by a hash of their ranks and parents.
#include "planner/tree_table.h"

#include <algorithm>

namespace ferry {

int TreeTable::Intern(const std::vector<int>& ranks, const std::vector<int>& parent) {
  if (ranks.size() == 1) return ranks[0];
  const int size = static_cast<int>(ranks.size());
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < size; ++i) {
    h = (h ^ static_cast<uint32_t>(ranks[i])) * 0xff51afd7ed558ccdull;
    h = (h ^ static_cast<uint32_t>(parent[i])) * 0xff51afd7ed558ccdull;
  }
  if (2 * (begin_.size() + 1) > slots_.size()) Rehash();
  const size_t mask = slots_.size() - 1;
  size_t at = SlotOf(h, mask);
  for (;; at = (at + 1) & mask) {
    const int t = slots_[at];
    if (t < 0) break;
    const int begin = begin_[t];
    if (hashes_[t] == h && end_[t] - begin == size &&
        std::equal(ranks.begin(), ranks.end(), ranks_.begin() + begin) &&
        std::equal(parent.begin(), parent.end(), parent_.begin() + begin)) {
      return num_ranks_ + t;
    }
  }
  const int id = static_cast<int>(begin_.size());
  slots_[at] = id;
  hashes_.push_back(h);
  Append(ranks, parent);
  return num_ranks_ + id;
}

void TreeTable::Append(const std::vector<int>& ranks, const std::vector<int>& parent) {
  const int size = static_cast<int>(ranks.size());
  const int begin = static_cast<int>(ranks_.size());
  begin_.push_back(begin);
  ranks_.insert(ranks_.end(), ranks.begin(), ranks.end());
  parent_.insert(parent_.end(), parent.begin(), parent.end());
  end_.push_back(static_cast<int>(ranks_.size()));
  // Member i's children are children_[child_begin_[c + i], child_begin_[c + i + 1]) with c the
  // tree's child_offset_, in member order: a counting sort of the members by parent.
  const int c = static_cast<int>(child_begin_.size());
  child_offset_.push_back(c);
  child_begin_.resize(static_cast<size_t>(c + size + 1), 0);
  children_.resize(static_cast<size_t>(begin + size));
  int* counts = child_begin_.data() + c;
  for (int i = 1; i < size; ++i) ++counts[parent[i] + 1];
  counts[0] = begin;
  for (int i = 0; i < size; ++i) counts[i + 1] += counts[i];
  std::vector<int> fill(counts, counts + size);
  for (int i = 1; i < size; ++i) children_[fill[parent[i]]++] = i;
}

void TreeTable::Rehash() {
  slots_.assign(std::max<size_t>(1024, slots_.size() * 2), -1);
  const size_t mask = slots_.size() - 1;
  for (size_t t = 0; t < hashes_.size(); ++t) {
    size_t at = SlotOf(hashes_[t], mask);
    while (slots_[at] >= 0) at = (at + 1) & mask;
    slots_[at] = static_cast<int>(t);
  }
}

}  // namespace ferry
