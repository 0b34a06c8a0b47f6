// Source selection of a reshard plan: which holder sends each delivery, balancing bytes sent per
// source rank and node. Internal to //planner.
#pragma once

#include "core/layout/topology.h"
#include "planner/intersect.h"
#include "planner/plan_facts.h"
#include "planner/routing.h"
#include "planner/tree_table.h"

namespace ferry {

// Sets every delivery's sender_frag. Deliveries with one candidate are assigned first (their load
// is fixed); the others go largest first (LPT), each to its least-loaded candidate: within the
// receiver's node by intra-node load; over the network by network load plus a penalty off the
// tree leader's rail (the local device index), then by node load.
void SelectSources(const Intersection& inter, const PlanFacts& facts, const Topology& topology,
                   const TreeTable& trees, int num_ranks, int num_nodes, Routes& routes);

}  // namespace ferry
