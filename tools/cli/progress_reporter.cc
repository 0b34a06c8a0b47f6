// ProgressReporter's thread: waits for a stage, then prints one line per interval until it ends.
#include "tools/cli/progress_reporter.h"

#include <cstdio>
#include <utility>

#include "core/base/strings.h"

namespace ferry::cli {
namespace {

// 4980000 -> "4.98 M", 12345 -> "12.3 k", 512 -> "512".
std::string FormatCount(int64_t n) {
  char text[32];
  if (n >= 1'000'000) {
    std::snprintf(text, sizeof(text), "%.2f M", static_cast<double>(n) / 1e6);
  } else if (n >= 10'000) {
    std::snprintf(text, sizeof(text), "%.1f k", static_cast<double>(n) / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(n));
  }
  return text;
}

// Wall time of a stage so far: "15 s".
std::string ElapsedText(std::chrono::steady_clock::duration elapsed) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f s", std::chrono::duration<double>(elapsed).count());
  return text;
}

}  // namespace

ProgressReporter::ProgressReporter(std::string prefix, std::ostream& out,
                                   std::chrono::milliseconds interval)
    : prefix_(std::move(prefix)), out_(out), interval_(interval) {
  if (interval_.count() > 0) thread_ = std::thread([this] { Loop(); });
}

ProgressReporter::~ProgressReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    active_ = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressReporter::Begin(std::string what, const sim::SimProgress* simulation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = std::move(what);
    simulation_ = simulation;
    start_ = Clock::now();
    next_line_ = start_ + interval_;
    active_ = true;
  }
  wake_.notify_all();
}

void ProgressReporter::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
    simulation_ = nullptr;
  }
  wake_.notify_all();
}

void ProgressReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!active_) {
      wake_.wait(lock);
      continue;
    }
    wake_.wait_until(lock, next_line_);
    const Clock::time_point now = Clock::now();
    if (!active_ || now < next_line_) continue;  // ended, restarted or woken early
    out_ << Line(now) << std::endl;
    while (next_line_ <= now) next_line_ += interval_;
  }
}

std::string ProgressReporter::Line(Clock::time_point now) const {
  std::string line = prefix_ + ": " + what_ + ": ";
  if (simulation_ != nullptr) {
    const int64_t total = simulation_->ops_total.load(std::memory_order_relaxed);
    const int64_t done = simulation_->ops_done.load(std::memory_order_relaxed);
    const double clock = simulation_->simulated_seconds.load(std::memory_order_relaxed);
    if (done == 0 && clock == 0) return line + "setting up, " + ElapsedText(now - start_);
    char percent[16];
    std::snprintf(percent, sizeof(percent), "%d%%",
                  total > 0 ? static_cast<int>(100 * done / total) : 0);
    line += FormatCount(done) + " of " + FormatCount(total) + " ops (" + percent + "), " +
            FormatSeconds(clock) + " simulated, ";
  }
  return line + ElapsedText(now - start_);
}

}  // namespace ferry::cli
