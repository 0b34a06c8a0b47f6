// Plan export: JSON (the full plan, for tools and the determinism test) and Graphviz DOT (ops as
// nodes grouped per rank, dependencies as solid edges, messages as dashed edges). Both are
// deterministic functions of the plan: the same plan gives byte-identical text.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/plan/stats.h"

namespace ferry {

// `indent` < 0 gives compact JSON. Buffers are listed by rank and size; given the layouts the
// plan was made from, with their names too.
std::string PlanToJson(const TransferPlan& plan, int indent = -1, const Layout* source = nullptr,
                       const Layout* destination = nullptr);
std::string StatsToJson(const PlanStats& stats, int indent = 2);
std::string PlanToDot(const TransferPlan& plan);
// Writes `text` to `path`, replacing it.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace ferry
