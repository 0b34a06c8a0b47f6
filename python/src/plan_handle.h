// PlanHandle: how Python holds a RefitPlan (immutable, shared with every Refit bound to it), and
// how a plan's inputs are read from Python (strategy name, topology).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "core/refit/refit.h"
#include "python/src/layout_handle.h"

namespace ferry::python {

struct PlanHandle {
  std::shared_ptr<const RefitPlan> plan;
};

// Plans `strategy` ("reshard" or "gather-broadcast") from `source` to `destination` with the
// planner options of `config`. `topology`: None (every rank either layout uses, `gpus_per_node`
// per node) or a topology file path (str). Releases the GIL while planning (CPU work on the
// layouts alone: a few ms for small layouts, a few hundred for the largest presets).
PlanHandle MakePlanHandle(const LayoutHandle& source, const LayoutHandle& destination,
                          const std::string& strategy, const pybind11::object& topology,
                          int gpus_per_node, const Config& config);

}  // namespace ferry::python
