// FinishHeap: the simulator's queue of active flow classes by next finish time, indexed by the
// class's slot so that a rate change moves one entry instead of queueing a new event. Internal to
// tools/sim.
#pragma once

#include <vector>

namespace ferry::sim {

// Min-heap of handles (small dense ints) by time, with O(log n) update and removal by handle; ties
// go to the lower `tie` (the class id, whatever slot the class has). Times and ties live in the
// heap's entries, so that sifting compares neighbouring memory.
class FinishHeap {
 public:
  bool Empty() const { return heap_.empty(); }
  int Top() const { return heap_.front().handle; }
  double TopTime() const { return heap_.front().time; }
  // A new entry, or one whose key fell, can only move up; one whose key rose, only down: the
  // other sift would leave it in place.
  void Set(int handle, double t, int tie) {
    if (handle >= static_cast<int>(pos_.size())) pos_.resize(handle + 1, -1);
    if (pos_[handle] < 0) {
      pos_[handle] = static_cast<int>(heap_.size());
      heap_.push_back({t, tie, handle});
      SiftUp(pos_[handle]);
      return;
    }
    const int p = pos_[handle];
    const Entry old = heap_[p];
    heap_[p].time = t;
    heap_[p].tie = tie;
    if (heap_[p] < old) {
      SiftUp(p);
    } else {
      SiftDown(p);
    }
  }
  void Remove(int handle) {
    if (handle >= static_cast<int>(pos_.size()) || pos_[handle] < 0) return;
    const int p = pos_[handle];
    const Entry last = heap_.back();
    heap_.pop_back();
    pos_[handle] = -1;
    if (last.handle == handle) return;
    heap_[p] = last;
    pos_[last.handle] = p;
    SiftDown(SiftUp(p));
  }

 private:
  struct Entry {
    double time;
    int tie;
    int handle;
    bool operator<(const Entry& o) const { return time < o.time || (time == o.time && tie < o.tie); }
  };
  void Place(int p, const Entry& e) {
    heap_[p] = e;
    pos_[e.handle] = p;
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
  std::vector<int> pos_;  // heap position of each handle, -1 when absent
};

}  // namespace ferry::sim
