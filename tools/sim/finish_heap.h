// FinishHeap: the simulator's queue of flow classes by next finish time, indexed by class id so
// that a rate change moves one entry instead of queueing a new event. Internal to tools/sim.
#pragma once

#include <utility>
#include <vector>

namespace ferry::sim {

// Min-heap of ids by time, with O(log n) update and removal by id; ties go to the lower id. The
// times live in the heap's entries, so that sifting compares neighbouring memory.
class FinishHeap {
 public:
  bool Empty() const { return heap_.empty(); }
  int Top() const { return heap_.front().second; }
  double TopTime() const { return heap_.front().first; }
  void Set(int id, double t) {
    if (id >= static_cast<int>(pos_.size())) pos_.resize(id + 1, -1);
    if (pos_[id] < 0) {
      pos_[id] = static_cast<int>(heap_.size());
      heap_.push_back({t, id});
    } else {
      heap_[pos_[id]].first = t;
    }
    SiftDown(SiftUp(pos_[id]));
  }
  void Remove(int id) {
    if (id >= static_cast<int>(pos_.size()) || pos_[id] < 0) return;
    const int p = pos_[id];
    const Entry last = heap_.back();
    heap_.pop_back();
    pos_[id] = -1;
    if (last.second == id) return;
    heap_[p] = last;
    pos_[last.second] = p;
    SiftDown(SiftUp(p));
  }

 private:
  using Entry = std::pair<double, int>;  // (time, id): pair order is the heap order
  void Place(int p, const Entry& e) {
    heap_[p] = e;
    pos_[e.second] = p;
  }
  int SiftUp(int p) {
    const Entry e = heap_[p];
    while (p > 0) {
      const int parent = (p - 1) / 2;
      if (!(e < heap_[parent])) break;
      Place(p, heap_[parent]);
      p = parent;
    }
    Place(p, e);
    return p;
  }
  void SiftDown(int p) {
    const Entry e = heap_[p];
    const int n = static_cast<int>(heap_.size());
    while (true) {
      int child = 2 * p + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child + 1] < heap_[child]) ++child;
      if (!(heap_[child] < e)) break;
      Place(p, heap_[child]);
      p = child;
    }
    Place(p, e);
  }
  std::vector<Entry> heap_;
  std::vector<int> pos_;  // heap position of each id, -1 when absent
};

}  // namespace ferry::sim
