// One CUDA stream of a rank's executor, as the simulator replays it: the launches it runs one
// after another, in the order they were made (core/runtime/rank_run_cuda.cc).
//
// A launch is one kernel: a local op's (Copy, Pack, Unpack, Convert, Quantize: LaunchGpu), or the
// direct reads whose offers came in together, which the executor launches as one kernel
// (FlushGpuWork) and whose reads move side by side (one kernel reading several peers). The
// simulator counts as "came in together" the reads that reach the stream at one instant; reads
// that come one by one are launches of their own, one after another, as the executor's sweeps
// launch them.
//
// The stream knows flows by their index only; the simulator starts the flows it hands back and
// reports each one's finish. Thread-safety: none; one per rank and simulation.
#pragma once

#include <cstddef>
#include <vector>

namespace ferry::sim {

class KernelStream {
 public:
  // Kernel flow `id` (a direct read when `read`) reaches the stream at t: appends it to `start`
  // when it starts now; otherwise it waits for the launches before it.
  void Arrive(int id, bool read, double t, std::vector<int>& start);
  // A flow of the running launch finished: true when that was its last, so that the next launch
  // starts (Next), which the caller does once it is done with the finished flow.
  bool Finish();
  // After Finish returned true: appends the flows of the next launch, if any, to `start`.
  void Next(std::vector<int>& start);

 private:
  struct Launch {
    size_t end;  // its flows are queued_[previous launch's end, end)
    bool reads;
    double made_at;
  };
  void StartLaunch(std::vector<int>& start);

  int running_ = 0;  // flows of the running launch not finished
  bool running_reads_ = false;
  double running_made_at_ = -1;
  bool freeing_ = false;  // the running launch finished; Next starts the one after it
  std::vector<int> queued_;  // flows of the queued launches, in order, from queued_head_
  size_t queued_head_ = 0;
  std::vector<Launch> launches_;  // queued launches, from head_
  size_t head_ = 0;
};

inline void KernelStream::Arrive(int id, bool read, double t, std::vector<int>& start) {
  const bool queued = head_ < launches_.size();
  // A read joins the read launch made at this instant: the last queued, or the running one.
  if (read && queued && launches_.back().reads && launches_.back().made_at == t) {
    queued_.push_back(id);
    ++launches_.back().end;
    return;
  }
  if (read && !queued && running_ > 0 && running_reads_ && running_made_at_ == t) {
    ++running_;
    start.push_back(id);
    return;
  }
  queued_.push_back(id);
  launches_.push_back({queued_.size(), read, t});
  if (running_ == 0 && !freeing_) StartLaunch(start);
}

inline bool KernelStream::Finish() {
  if (--running_ > 0) return false;
  freeing_ = true;
  return true;
}

inline void KernelStream::Next(std::vector<int>& start) {
  freeing_ = false;
  if (head_ < launches_.size()) StartLaunch(start);
}

// Starts the first queued launch; drops the started launches' records once none is queued, so
// memory follows the queue.
inline void KernelStream::StartLaunch(std::vector<int>& start) {
  const Launch& l = launches_[head_++];
  running_reads_ = l.reads;
  running_made_at_ = l.made_at;
  running_ = static_cast<int>(l.end - queued_head_);
  for (; queued_head_ < l.end; ++queued_head_) start.push_back(queued_[queued_head_]);
  if (head_ < launches_.size()) return;
  launches_.clear();
  queued_.clear();
  head_ = 0;
  queued_head_ = 0;
}

}  // namespace ferry::sim
