// CopyPool: the executor's copy worker threads, and how one op's copies become their work.
//
// An op's copies (Copy, Pack, Unpack, Convert, or a direct read's copies from a peer) run on the
// executor thread when they are small, else as tasks on the pool: each copy is cut into slices of
// ~512 KiB (CopyItem), and runs of consecutive items of one op form a task, so that thousands of
// small copies cost a few lock round trips, not one each. A host Quantize op's 128x128 blocks
// (core/base/fp8_block.h) are work of the same pool: ranges of blocks, one task each
// (StartQuantize); blocks are independent, so the bytes equal the one-thread reference. Each
// submitted op has a counter of tasks left; when it reaches zero the op is reported, with its
// first failure, through Done().
//
// Ownership: the pool never owns copy memory; the geometries and items a submitted op's tasks
// point at must stay valid until Done() reports that op (or Drain() returns).
// Threading: Submit, Done, RunOne, Drain and Start are called by one thread (the executor's);
// the workers run tasks concurrently with it. Destruction stops the workers after their current
// task (call Drain first to finish what was submitted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/fp8_block.h"
#include "core/base/status.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

// Where one copy reads and writes: `from` and `to` point at the regions' byte offset 0. `from` is
// an address in process `pid` (read with process_vm_readv) when pid is not 0, else in this one.
struct CopyEnds {
  const char* from;
  char* to;
  int64_t pid;
};

// One Quantize op's block quantization on host memory: Fp8BlockQuantizeBlocks' arguments.
struct QuantizeWork {
  DType dtype = DType::kBF16;
  const unsigned char* src = nullptr;
  int64_t matrices = 0, rows = 0, cols = 0;
  unsigned char* dst = nullptr;
  unsigned char* scales = nullptr;  // in format `fmt` (core/base/fp8_scale_format.h)
  Fp8ScaleFormat fmt = Fp8ScaleFormat::kFloat32;
};

// One piece of copy work: a slice of one copy, or (quantize set) blocks [slice.row_begin,
// slice.row_end) of a QuantizeWork (geometry, from and to unused).
struct CopyItem {
  const CopyGeometry* geometry;
  CopySlice slice;
  const char* from;
  char* to;
  int64_t remote_pid = 0;  // non-zero: `from` is an address in that process (process_vm_readv)
  const QuantizeWork* quantize = nullptr;
};

// Runs one item on the calling thread.
Status RunCopyItem(const CopyItem& item);

class CopyPool {
 public:
  // A run of consecutive items of one op, run by one worker in one go.
  struct Task {
    const CopyItem* items;
    int count;
    int op;
  };

  // Starts `threads` workers (0: every copy runs on the caller's thread).
  explicit CopyPool(int threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }

  // Runs op `op`'s copies (geometries[p] from ends[p].from to ends[p].to, `bytes` in all): on the
  // calling thread when they are small or the pool has no workers (returns true: done), else cut
  // into items, kept in `items`, and submitted as tasks (returns false: Done() reports the op).
  // `geometries` and `items` must outlive the op's tasks. An error from an inline copy is returned.
  Result<bool> Start(int op, std::span<const CopyGeometry> geometries, std::span<const CopyEnds> ends,
                     int64_t bytes, std::vector<CopyItem>& items);

  // Runs op `op`'s block quantization `work`: on the calling thread when it is one block or the
  // pool has no workers (returns true: done), else as about (threads + 1) * 4 ranges of whole
  // blocks, kept in `items`, one task each (returns false: Done() reports the op). `work` and
  // `items` must outlive the op's tasks.
  bool StartQuantize(int op, const QuantizeWork& work, std::vector<CopyItem>& items);

  // Queues op `op`'s tasks. `tasks` must not be empty.
  void Submit(int op, std::vector<Task> tasks);

  // Ops whose tasks all finished, with the first failure per op. Waits up to `wait` for one.
  std::vector<std::pair<int, Status>> Done(std::chrono::microseconds wait);

  // Runs one queued task on the calling thread (the executor helps instead of idling). Returns
  // false when the queue is empty.
  bool RunOne();

  // Blocks until every submitted task has run (used before returning from a failed run).
  void Drain();

 private:
  void Work();
  void RunFrontLocked(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Task> queue_;
  std::unordered_map<int, int> remaining_;
  std::unordered_map<int, Status> failures_;
  std::vector<std::pair<int, Status>> done_;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ferry
