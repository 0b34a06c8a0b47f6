// Network demand: what the layouts force onto the network whatever the plan, the input of the
// lower bound (core/plan/stats.h). Internal to //planner.
#pragma once

#include "core/plan/stats.h"
#include "planner/intersect.h"
#include "planner/plan_facts.h"

namespace ferry {

// Per piece, each destination node that needs it and holds no copy of it must receive its bytes
// once; a piece needed off its holders' nodes must leave them. Pieces of overlapping destination
// boxes must have been made distinct first (SplitOverlappingGroups), so that each distinct byte a
// node needs is counted once.
NetworkDemand ComputeDemand(const Intersection& inter, const PlanFacts& facts, int num_nodes);

}  // namespace ferry
