// Plan export: JSON (the full plan, for tools and the determinism test) and Graphviz DOT (ops as
// nodes grouped per rank, dependencies as solid edges, messages as dashed edges). Both are
// deterministic functions of the plan: the same plan gives byte-identical text.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/plan/stats.h"

namespace ferry {

// `indent` < 0 gives compact JSON, else nlohmann::json's dump(indent) layout. Buffers are listed
// by rank and size; given the layouts the plan was made from, with their names too.
// `staging_needed` is PlanOrderStagingBytes (staging_layout.h): the smallest
// executor.staging_budget that runs the plan with every message staged; computed here unless the
// caller, which already has it, passes it.
//
// WritePlanJson writes to `out` as it reads the plan: no memory beyond the stream's buffer, for
// plans of any size. PlanToJson returns the same text as a string (for tests and small plans);
// WritePlanJsonFile writes it to a file, replacing it. Blocking; the plan is only read.
void WritePlanJson(std::ostream& out, const TransferPlan& plan, int indent = -1,
                   const Layout* source = nullptr, const Layout* destination = nullptr,
                   std::optional<int64_t> staging_needed = std::nullopt);
std::string PlanToJson(const TransferPlan& plan, int indent = -1, const Layout* source = nullptr,
                       const Layout* destination = nullptr);
Status WritePlanJsonFile(const std::string& path, const TransferPlan& plan, int indent = -1,
                         const Layout* source = nullptr, const Layout* destination = nullptr,
                         std::optional<int64_t> staging_needed = std::nullopt);
std::string StatsToJson(const PlanStats& stats, int indent = 2);
// Graphviz DOT, streamed, as a string, or to a file (as for JSON).
void WritePlanDot(std::ostream& out, const TransferPlan& plan);
std::string PlanToDot(const TransferPlan& plan);
Status WritePlanDotFile(const std::string& path, const TransferPlan& plan);

}  // namespace ferry
