// CopyPool: see copy_pool.h.
#include "core/runtime/copy_pool.h"

#include <algorithm>

#include "core/runtime/peer_read.h"

namespace ferry {
namespace {

constexpr int64_t kSliceBytes = 512 << 10;  // copy work per task
constexpr int64_t kInlineBytes = 64 << 10;  // smaller copies run on the executor thread

int64_t ItemBytes(const CopyItem& item) {
  const CopySlice& s = item.slice;
  if (s.row_begin == s.row_end) return s.byte_end - s.byte_begin;
  return (s.row_end - s.row_begin) * item.geometry->run * DTypeSize(item.geometry->to_dtype);
}

}  // namespace

Status RunCopyItem(const CopyItem& item) {
  if (item.quantize != nullptr) {
    const QuantizeWork& w = *item.quantize;
    Fp8BlockQuantizeBlocks(w.dtype, w.src, w.rows, w.cols, w.dst, w.scales, w.fmt,
                           item.slice.row_begin, item.slice.row_end);
    return Status::Ok();
  }
  return item.remote_pid != 0 ? ReadFromPeer(item.remote_pid, *item.geometry, item.slice,
                                             reinterpret_cast<uint64_t>(item.from), item.to)
                              : RunCopySlice(*item.geometry, item.slice, item.from, item.to);
}

CopyPool::CopyPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

Result<bool> CopyPool::Start(int op, std::span<const CopyGeometry> geometries,
                             std::span<const CopyEnds> ends, int64_t bytes,
                             std::vector<CopyItem>& items) {
  if (bytes <= kInlineBytes || threads() == 0) {
    for (size_t p = 0; p < geometries.size(); ++p) {
      FERRY_RETURN_IF_ERROR(RunCopyItem(
          {&geometries[p], WholeCopy(geometries[p]), ends[p].from, ends[p].to, ends[p].pid}));
    }
    return true;
  }
  items.clear();
  items.reserve(geometries.size());
  for (size_t p = 0; p < geometries.size(); ++p) {
    const CopyGeometry& g = geometries[p];
    if (g.bytes() <= kSliceBytes) {
      items.push_back({&g, WholeCopy(g), ends[p].from, ends[p].to, ends[p].pid});
      continue;
    }
    for (const CopySlice& s : SliceCopy(g, kSliceBytes, (threads() + 1) * 4)) {
      items.push_back({&g, s, ends[p].from, ends[p].to, ends[p].pid});
    }
  }
  std::vector<Task> tasks;
  int64_t task_bytes = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    if (tasks.empty() || task_bytes >= kSliceBytes) {
      tasks.push_back({&items[k], 0, op});
      task_bytes = 0;
    }
    ++tasks.back().count;
    task_bytes += ItemBytes(items[k]);
  }
  if (tasks.empty()) return true;
  Submit(op, std::move(tasks));
  return false;
}

bool CopyPool::StartQuantize(int op, const QuantizeWork& work, std::vector<CopyItem>& items) {
  const int64_t blocks = Fp8BlockCount(work.matrices, work.rows, work.cols);
  const int64_t ranges = std::min<int64_t>(blocks, (threads() + 1) * 4);
  items.clear();
  if (blocks <= 1 || threads() == 0) {
    Fp8BlockQuantizeBlocks(work.dtype, work.src, work.rows, work.cols, work.dst, work.scales,
                           work.fmt, 0, blocks);
    return true;
  }
  std::vector<Task> tasks;
  items.reserve(static_cast<size_t>(ranges));
  for (int64_t k = 0; k < ranges; ++k) {
    const CopySlice range{blocks * k / ranges, blocks * (k + 1) / ranges, 0, 0};
    items.push_back({nullptr, range, nullptr, nullptr, 0, &work});
  }
  for (CopyItem& item : items) tasks.push_back({&item, 1, op});
  Submit(op, std::move(tasks));
  return false;
}

void CopyPool::Submit(int op, std::vector<Task> tasks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    remaining_[op] = static_cast<int>(tasks.size());
    for (Task& t : tasks) queue_.push_back(t);
  }
  work_cv_.notify_all();
}

std::vector<std::pair<int, Status>> CopyPool::Done(std::chrono::microseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_.empty() && wait.count() > 0) done_cv_.wait_for(lock, wait, [&] { return !done_.empty(); });
  std::vector<std::pair<int, Status>> out(done_.begin(), done_.end());
  done_.clear();
  return out;
}

bool CopyPool::RunOne() {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty()) return false;
  RunFrontLocked(lock);
  return true;
}

void CopyPool::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

void CopyPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    RunFrontLocked(lock);
  }
}

// Pops the front task, runs it with the lock released, and records its result.
void CopyPool::RunFrontLocked(std::unique_lock<std::mutex>& lock) {
  Task task = queue_.front();
  queue_.pop_front();
  ++running_;
  lock.unlock();
  Status status;
  for (int k = 0; k < task.count && status.ok(); ++k) status = RunCopyItem(task.items[k]);
  lock.lock();
  --running_;
  auto& failure = failures_[task.op];
  if (!status.ok() && failure.ok()) failure = status;
  if (--remaining_[task.op] == 0) {
    done_.emplace_back(task.op, failure);
    remaining_.erase(task.op);
    failures_.erase(task.op);
  }
  if (!done_.empty() || (queue_.empty() && running_ == 0)) done_cv_.notify_all();
}

}  // namespace ferry
