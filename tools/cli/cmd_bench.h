// `ferry bench transports`: compares transports on this machine.
//  1. A message-size sweep per transport configuration: two ranks (two local processes; two
//     threads of one process for `local`), rank 0 streams messages of one size to rank 1 through
//     the Executor (plan: n Sends -> n Recvs, up to executor.max_in_flight in flight), and a
//     single message of that size alone (its latency through the whole stack). With --pairs P,
//     2P ranks: P such pairs (ranks 2p -> 2p + 1) stream at once and the bandwidth is theirs
//     together, the way the ranks of a refit on one host share its cores and memory.
//  2. One refit plan (the demo's model, smaller) over each transport with `ferry run`.
// Writes DIR/sweep.csv, DIR/plan.csv and DIR/sweep.svg (GB/s by message size, one line per
// transport, log x axis) and prints both tables.
//
// The pieces below are exposed for tests; they are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::cli {

struct SweepPoint {
  int64_t size_bytes = 0;
  int64_t messages = 0;               // of all pairs together
  double stream_seconds = 0;          // best of the repetitions, n messages
  double single_message_seconds = 0;  // best of the repetitions, one message a pair
  double StreamGBps() const { return stream_seconds > 0 ? messages * size_bytes / stream_seconds / 1e9 : 0; }
};

struct SweepSeries {
  std::string label;  // "tcp", "ucx sm+tcp", ...
  int pairs = 1;      // sender -> receiver pairs streaming at once (2 x pairs ranks)
  std::vector<SweepPoint> points;
};

// Most pairs `ferry bench transports --pairs` runs at once.
inline constexpr int kMaxBenchPairs = 32;

// The sizes swept: powers of 4 from `min_bytes` to `max_bytes` inclusive.
std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes);

// "transport,size_bytes,messages,stream_seconds,stream_GBps,single_message_us,pairs" rows.
std::string SweepCsv(const std::vector<SweepSeries>& series);
// A table: one row per size, one column per transport (GB/s and single-message time).
std::string SweepTable(const std::vector<SweepSeries>& series);
// A self-contained SVG line chart of stream GB/s by message size (log2 x axis), with axis labels,
// ticks, a legend and a title.
std::string SweepSvg(const std::vector<SweepSeries>& series, const std::string& title);

}  // namespace ferry::cli
