// RunWatchdog: a thread that calls an action when an armed deadline passes before it is disarmed.
// The executor arms it around each Run with the run's deadline (plus a grace) and aborting the
// communicator as the action, so that a transport call that hangs on the executor's thread — a
// Poll that ignores its deadline, a library call that never returns — still ends in an error at
// the run's deadline: the abort wakes the hung call (Transport::Abort must make it return), and
// the failure names the hung call. Without it the executor only checks its deadline between calls.
//
// Threading: Arm and Disarm from one thread (the executor's); the action runs on the watchdog's
// own thread and must be safe to call from any thread. The destructor disarms and joins.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/base/deadline.h"

namespace ferry {

class RunWatchdog {
 public:
  RunWatchdog();
  ~RunWatchdog();
  RunWatchdog(const RunWatchdog&) = delete;
  RunWatchdog& operator=(const RunWatchdog&) = delete;

  // Calls `action` once, on the watchdog thread, when `deadline` passes unless Disarm comes
  // first. Replaces an earlier arming. Non-blocking.
  void Arm(Deadline deadline, std::function<void()> action);
  // Cancels the arming; when the action is running already, waits for it to return.
  void Disarm();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  bool firing_ = false;
  Deadline deadline_ = Deadline::Never();
  std::function<void()> action_;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace ferry
