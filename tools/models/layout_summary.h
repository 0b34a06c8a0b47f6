// A one-screen summary of a Layout (ranks, tensors, fragments, bytes per rank), as `ferry layout`
// prints it. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/layout/layout.h"

namespace ferry::models {

struct LayoutSummary {
  std::string model;      // e.g. "qwen3-235b-a22b"; may be empty
  std::string framework;  // e.g. "megatron:tp=2,pp=4,ep=16,etp=2,dp=16,cp=1"; may be empty
  int num_ranks = 0;
  int first_rank = 0;
  int last_rank = -1;
  int64_t tensors = 0;
  int64_t buffers = 0;
  int64_t fragments = 0;
  int64_t min_rank_bytes = 0;  // fragment bytes held by the lightest rank
  double mean_rank_bytes = 0;
  int64_t max_rank_bytes = 0;
  int64_t min_rank = -1;  // a rank holding min_rank_bytes (lowest such)
  int64_t max_rank = -1;  // a rank holding max_rank_bytes (lowest such)
  int64_t total_bytes = 0;    // fragment bytes over all ranks (replicas counted each time)
  int64_t logical_bytes = 0;  // each logical tensor once
};

LayoutSummary SummarizeLayout(const Layout& layout, const std::string& model = "",
                              const std::string& framework = "");

// Multi-line human-readable text, one "key: value" per line.
std::string FormatLayoutSummary(const LayoutSummary& summary);

}  // namespace ferry::models
