// FinishHeap: the simulator's queue of flow classes by next finish time, indexed by class id so
// that a rate change moves one entry instead of queueing a new event. Internal to tools/sim.
#pragma once

#include <vector>

namespace ferry::sim {

// Min-heap of ids by time, with O(log n) update and removal by id; ties go to the lower id.
class FinishHeap {
 public:
  bool Empty() const { return heap_.empty(); }
  int Top() const { return heap_.front(); }
  double TopTime() const { return time_[heap_.front()]; }
  void Set(int id, double t) {
    if (id >= static_cast<int>(pos_.size())) {
      pos_.resize(id + 1, -1);
      time_.resize(id + 1, 0);
    }
    time_[id] = t;
    if (pos_[id] < 0) {
      pos_[id] = static_cast<int>(heap_.size());
      heap_.push_back(id);
    }
    SiftDown(SiftUp(pos_[id]));
  }
  void Remove(int id) {
    if (id >= static_cast<int>(pos_.size()) || pos_[id] < 0) return;
    int p = pos_[id];
    int last = heap_.back();
    heap_.pop_back();
    pos_[id] = -1;
    if (last == id) return;
    heap_[p] = last;
    pos_[last] = p;
    SiftDown(SiftUp(p));
  }

 private:
  bool Less(int a, int b) const { return time_[a] < time_[b] || (time_[a] == time_[b] && a < b); }
  void Place(int p, int id) {
    heap_[p] = id;
    pos_[id] = p;
  }
  int SiftUp(int p) {
    int id = heap_[p];
    while (p > 0) {
      int parent = (p - 1) / 2;
      if (!Less(id, heap_[parent])) break;
      Place(p, heap_[parent]);
      p = parent;
    }
    Place(p, id);
    return p;
  }
  void SiftDown(int p) {
    int id = heap_[p];
    const int n = static_cast<int>(heap_.size());
    while (true) {
      int child = 2 * p + 1;
      if (child >= n) break;
      if (child + 1 < n && Less(heap_[child + 1], heap_[child])) ++child;
      if (!Less(heap_[child], id)) break;
      Place(p, heap_[child]);
      p = child;
    }
    Place(p, id);
  }
  std::vector<int> heap_;
  std::vector<int> pos_;  // heap position of each id, -1 when absent
  std::vector<double> time_;
};

}  // namespace ferry::sim
