// Reports of a simulation: a text summary (utilisation table, critical path), a Chrome-trace JSON
// timeline (chrome://tracing, Perfetto) and an SVG chart of per-node network ingress over time.
// All functions are pure and thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "tools/sim/simulator.h"

namespace ferry::sim {

// Utilisation per link class, one line each.
std::string UtilisationTable(const SimResult& result);
// The critical path, compressed: runs of consecutive steps of the same kind on the same rank are
// merged; at most `max_lines` lines (the first and last kept).
std::string CriticalPathText(const SimResult& result, int max_lines = 12);

// Chrome trace: one complete event ("ph":"X") per op, pid = node, tid = rank, times in us. Needs
// result.op_times (SimOptions::record_op_times). At most `max_events` ops are written (the ones
// that start first); fails when op_times is missing.
Result<std::string> ChromeTraceJson(const TransferPlan& plan, const SimResult& result,
                                    int64_t max_events = 2'000'000);

// SVG line chart of network ingress (GB/s) per node over time. Needs result.ingress
// (SimOptions::record_ingress). With more than `max_lines` nodes it draws min / mean / max.
Result<std::string> IngressSvg(const SimResult& result, int max_lines = 16);

// Writes `text` to `path`; IoError on failure.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace ferry::sim
