// ShareHeap: the min-heap of (fair share, link) pairs that the simulator's progressive filling
// pops links from. Internal to tools/sim.
#pragma once

#include <utility>
#include <vector>

namespace ferry::sim {

// Binary min-heap of (share, link) pairs in pair order (ties to the lower link). Not thread-safe;
// one per simulation, reused across recomputations.
class ShareHeap {
 public:
  using Entry = std::pair<double, int>;
  bool Empty() const { return heap_.empty(); }
  const Entry& Top() const { return heap_.front(); }
  void Clear() { heap_.clear(); }
  // Adds entries without ordering them; Build() must follow before Top/Pop/ReplaceTop.
  void Append(double share, int link) { heap_.push_back({share, link}); }
  void Build() {
    for (int p = static_cast<int>(heap_.size()) / 2 - 1; p >= 0; --p) SiftDown(p);
  }
  void Push(double share, int link) {
    heap_.push_back({share, link});
    int p = static_cast<int>(heap_.size()) - 1;
    const Entry e = heap_[p];
    while (p > 0) {
      const int parent = (p - 1) / 2;
      if (!Less(e, heap_[parent])) break;
      heap_[p] = heap_[parent];
      p = parent;
    }
    heap_[p] = e;
  }
  void Pop() {
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
  }
  // Pop() then Push(share, link) in one sift.
  void ReplaceTop(double share, int link) {
    heap_.front() = {share, link};
    SiftDown(0);
  }

 private:
  // Pair order, spelled out (the same result, NaN included): std::pair's operator< goes through
  // a three-way comparison that costs several times these compares in the filling's inner loop.
  static bool Less(const Entry& a, const Entry& b) {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  }
  void SiftDown(int p) {
    const Entry e = heap_[p];
    const int n = static_cast<int>(heap_.size());
    while (true) {
      int child = 2 * p + 1;
      if (child >= n) break;
      if (child + 1 < n && Less(heap_[child + 1], heap_[child])) ++child;
      if (!Less(heap_[child], e)) break;
      heap_[p] = heap_[child];
      p = child;
    }
    heap_[p] = e;
  }
  std::vector<Entry> heap_;
};

}  // namespace ferry::sim
