// `ferry run`'s numbers: what each rank measures per refit, how rank 0 gathers them through the
// store, the memcpy reference, and the report table with its labelled ratios. Pure functions apart
// from the store and MeasureMemcpy's copying; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store.h"
#include "core/runtime/transport_traffic.h"
#include "planner/planner.h"

namespace ferry::cli {

// One rank's numbers for one refit, passed to rank 0 through the store.
struct RankSample {
  int64_t start_ns = 0, end_ns = 0;  // wall clock (system_clock), comparable across ranks
  // The instant every rank was to start at (start_instant.h), and when this rank learned it.
  int64_t instant_ns = 0, known_ns = 0;
  int64_t bytes_sent = 0, bytes_copied = 0, peak_staging = 0, bytes_read_direct = 0;
  int64_t bytes_delivered = 0;  // RefitStats::bytes_delivered
  int64_t bytes_quantized_direct = 0;  // ExecutorStats::bytes_quantized_direct
  int64_t bytes_read_packed = 0;       // ExecutorStats::bytes_read_packed
  double executor_seconds = 0;
  std::map<std::string, TransportTraffic> by_transport;  // ExecutorStats::by_transport

  std::string Encode() const;
  // Fails on text that is not an encoded sample (the store is shared by every rank).
  static Result<RankSample> Decode(const std::string& text);
};

// All ranks' numbers for one refit, as rank 0 sees them.
struct RefitSample {
  // From the agreed start instant (or an earlier start, should a rank's clock run ahead) to the
  // last rank's end.
  double seconds = 0;
  int64_t bytes_sent = 0, bytes_copied = 0, peak_staging_max = 0, peak_staging_sum = 0;
  int64_t bytes_read_direct = 0;
  int64_t bytes_quantized_direct = 0;  // of bytes_read_direct, quantized into fp8 as read
  int64_t bytes_read_packed = 0;       // of bytes_read_direct, from senders' packed slots
  // Destination bytes the refit wrote, summed over the ranks: the whole layout's, or for a refit
  // resumed after a recovery (`resumed`) only what the failed attempt had left.
  int64_t bytes_delivered = 0;
  bool resumed = false;
  double longest_rank_seconds = 0;  // the slowest rank's own Executor::Run time
  // How late the last rank started after the instant (woken late by the scheduler, or it learned
  // the instant after it had passed). Part of `seconds`, and not work of the refit (a simulator
  // starts every rank at 0).
  double start_spread_seconds = 0;
  // How long before the instant the last rank to learn it did so (negative: after it); what rank
  // 0's StartMargin adapts to.
  double start_slack_seconds = 0;
  std::map<std::string, TransportTraffic> by_transport;  // summed over the ranks
};

// Publishes this rank's sample under `key`, then calls `published` (every rank: a barrier that
// ends early when a rank failed, so rank 0 never waits for a sample that will not come); rank 0
// (only) then gathers all `size` and returns their aggregate (AggregateSamples), other ranks an
// empty sample.
Result<RefitSample> ShareSample(Store& store, const std::string& key, int rank, int size,
                                const RankSample& sample, Deadline deadline,
                                const std::function<Status()>& published);

// The refit of `samples` (one per rank, each with the same instant_ns): timed from the instant,
// with the start spread measured from it too, and the bytes summed over the ranks.
RefitSample AggregateSamples(const std::vector<RankSample>& samples);

// One way of running a refit that the report compares: a strategy, and whether ranks of one node
// read each other's memory directly (executor.direct_intra_node) or go through the transport.
struct RunVariant {
  std::string name;  // "reshard", "reshard (transport only)", "gather-broadcast"
  Strategy strategy = Strategy::kReshard;
  bool direct_reads = true;
};

struct VariantSummary {
  RunVariant variant;
  double mean = 0, best = 0;
  double mean_start_spread = 0;  // RefitSample::start_spread_seconds over the samples
  RefitSample last;
};

VariantSummary Summarize(const RunVariant& variant, const std::vector<RefitSample>& samples);

// The bytes the memcpy reference copies for a refit delivering `delivered` bytes: that many,
// clamped to [1 MiB, 1 GiB]. The reference allocates two buffers of this size on rank 0 (host or
// GPU) beside the refit's own, so it must not grow with the model; 1 GiB is far past every cache
// (an H200's L2 is 60 MiB), so a larger copy runs at the same rate.
int64_t MemcpyReferenceBytes(int64_t delivered);

// Single-threaded memcpy bandwidth in bytes per second for buffers of `bytes` (at least 1 MiB):
// the median of several copies between two buffers touched beforehand.
double MeasureMemcpy(int64_t bytes);

// The side-by-side table (time, bandwidth, bytes, staging per variant) and the ratios between
// reshard and gather-broadcast, each labelled with what it compares.
std::string FormatRunReport(const std::string& description, int64_t delivered, double memcpy_bps,
                            const std::vector<VariantSummary>& summaries, int iterations);

}  // namespace ferry::cli
