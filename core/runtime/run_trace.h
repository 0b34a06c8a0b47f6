// RunTrace: an optional timeline of one rank's run (executor.trace_dir): the set-up, each op from
// its start to its completion, each GPU kernel launch from enqueue to the completion the executor
// saw, and direct-read offers as they arrive. Executor::Run writes it after the run as a Chrome
// trace-event JSON file (`<dir>/rank<R>.run<N>.json`) that Perfetto (ui.perfetto.dev) and
// chrome://tracing open. Timestamps are the host's monotonic clock in microseconds, which every
// process of one machine shares, so the files of one machine's ranks line up when merged
// (docs/running.md says how). Recording costs a clock read and a small record per op.
//
// Thread-safety: none; the executor thread records and writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry {

class RunTrace {
 public:
  // Where an event is drawn: one row per lane under the rank.
  enum class Lane : uint8_t { kSetUp = 0, kNetwork = 1, kCopy = 2, kGpu = 3 };

  // The monotonic clock, in nanoseconds.
  static int64_t Now();

  // Forgets the events of the previous run.
  void Clear() { events_.clear(); }
  // A span [begin_ns, end_ns) named `name`; `args` are "key": value pairs already JSON-encoded
  // (without braces; may be empty).
  void Span(Lane lane, std::string name, int64_t begin_ns, int64_t end_ns, std::string args = "");
  // A point in time.
  void Instant(Lane lane, std::string name, int64_t at_ns, std::string args = "");
  size_t size() const { return events_.size(); }

  // Writes the events as one JSON object {"traceEvents": [...]}, the process named "rank <rank>"
  // and its lanes named, to `path` (replaced). Fails naming the path.
  Status Write(const std::string& path, int rank) const;

 private:
  struct Event {
    Lane lane;
    bool instant;
    int64_t begin_ns;
    int64_t end_ns;
    std::string name;
    std::string args;
  };
  std::vector<Event> events_;
};

}  // namespace ferry
