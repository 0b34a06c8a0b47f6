// Layout summaries for the CLI.
#include "tools/models/layout_summary.h"

#include <cstdio>
#include <vector>

#include "core/base/strings.h"

namespace ferry::models {

LayoutSummary SummarizeLayout(const Layout& layout, const std::string& model,
                              const std::string& framework) {
  LayoutSummary s;
  s.model = model;
  s.framework = framework;
  s.tensors = static_cast<int64_t>(layout.tensors.size());
  s.buffers = static_cast<int64_t>(layout.buffers.size());
  s.fragments = static_cast<int64_t>(layout.fragments.size());
  s.logical_bytes = layout.LogicalBytes();
  const auto per_rank = layout.BytesPerRank();  // sorted by rank
  s.num_ranks = static_cast<int>(per_rank.size());
  if (per_rank.empty()) return s;
  s.first_rank = per_rank.begin()->first;
  s.last_rank = per_rank.rbegin()->first;
  s.min_rank_bytes = per_rank.begin()->second;
  s.max_rank_bytes = per_rank.begin()->second;
  s.min_rank = s.max_rank = per_rank.begin()->first;
  for (const auto& [rank, bytes] : per_rank) {
    s.total_bytes += bytes;
    if (bytes < s.min_rank_bytes) {
      s.min_rank_bytes = bytes;
      s.min_rank = rank;
    }
    if (bytes > s.max_rank_bytes) {
      s.max_rank_bytes = bytes;
      s.max_rank = rank;
    }
  }
  s.mean_rank_bytes = static_cast<double>(s.total_bytes) / s.num_ranks;
  return s;
}

std::string FormatLayoutSummary(const LayoutSummary& s) {
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    out += key + ": " + value + "\n";
  };
  if (!s.model.empty()) line("model", s.model);
  if (!s.framework.empty()) line("framework", s.framework);
  line("ranks", std::to_string(s.num_ranks) +
                    (s.num_ranks > 0 ? " (" + std::to_string(s.first_rank) + ".." +
                                           std::to_string(s.last_rank) + ")"
                                     : ""));
  line("tensors", std::to_string(s.tensors));
  line("buffers", std::to_string(s.buffers));
  line("fragments", std::to_string(s.fragments));
  line("bytes per rank", "min " + FormatBytes(static_cast<double>(s.min_rank_bytes)) + " (rank " +
                             std::to_string(s.min_rank) + "), mean " +
                             FormatBytes(s.mean_rank_bytes) + ", max " +
                             FormatBytes(static_cast<double>(s.max_rank_bytes)) + " (rank " +
                             std::to_string(s.max_rank) + ")");
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.2f", s.logical_bytes > 0
                                                  ? static_cast<double>(s.total_bytes) / s.logical_bytes
                                                  : 0.0);
  line("total bytes", FormatBytes(static_cast<double>(s.total_bytes)) + " (" + ratio +
                          "x logical, replicas included)");
  line("logical bytes", FormatBytes(static_cast<double>(s.logical_bytes)) + " (" +
                            std::to_string(s.logical_bytes) + " B)");
  return out;
}

}  // namespace ferry::models
