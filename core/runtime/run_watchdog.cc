// RunWatchdog: one thread sleeping until the armed deadline, then running the action.
#include "core/runtime/run_watchdog.h"

#include <chrono>

namespace ferry {

RunWatchdog::RunWatchdog() : thread_([this] { Loop(); }) {}

RunWatchdog::~RunWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    armed_ = false;
  }
  cv_.notify_all();
  thread_.join();
}

void RunWatchdog::Arm(Deadline deadline, std::function<void()> action) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    deadline_ = deadline;
    action_ = std::move(action);
  }
  cv_.notify_all();
}

void RunWatchdog::Disarm() {
  std::unique_lock<std::mutex> lock(mu_);
  armed_ = false;
  cv_.wait(lock, [this] { return !firing_; });
}

void RunWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    if (!deadline_.Expired()) {
      // Bounded slices: Deadline::Never() must not overflow the clock arithmetic of wait_until.
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    armed_ = false;
    firing_ = true;
    std::function<void()> action = std::move(action_);
    lock.unlock();
    action();
    lock.lock();
    firing_ = false;
    cv_.notify_all();
  }
}

}  // namespace ferry
