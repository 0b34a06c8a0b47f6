// ProgressReporter: progress lines for a command's long stages (planning and simulating in
// `ferry simulate`), printed by a background thread while a stage runs. A stage that ends within
// one interval prints nothing, so short runs stay quiet; a longer one prints a line each interval:
//   ferry simulate: planning gather-broadcast: 10 s
//   ferry simulate: simulating reshard: setting up, 2 s
//   ferry simulate: simulating reshard: 1.23 M of 4.98 M ops (25%), 312.4 ms simulated, 15 s
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include "tools/sim/simulator.h"

namespace ferry::cli {

// Thread-safety: Begin and End are called from one thread (the command's); the reporter's own
// thread writes to `out`, which the caller leaves alone while a stage runs.
class ProgressReporter {
 public:
  // `prefix` starts every line ("ferry simulate"); `out` must outlive the reporter. An interval
  // <= 0 makes a reporter that prints nothing and starts no thread.
  ProgressReporter(std::string prefix, std::ostream& out, std::chrono::milliseconds interval);
  ~ProgressReporter();  // ends the stage in progress and joins the thread
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Starts the stage `what` (ending the previous one); `simulation`, when not null, adds where
  // that simulation is to each line and must stay valid until End() or the next Begin().
  void Begin(std::string what, const sim::SimProgress* simulation = nullptr);
  void End();

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  std::string Line(Clock::time_point now) const;  // with mu_ held

  const std::string prefix_;
  std::ostream& out_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool active_ = false;
  std::string what_;
  const sim::SimProgress* simulation_ = nullptr;
  Clock::time_point start_, next_line_;
  std::thread thread_;  // last: starts once the members above exist; none when disabled
};

}  // namespace ferry::cli
