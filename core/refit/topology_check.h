// The check a Refit makes when it binds a plan to a session: the topology the plan assumed must
// agree with where the communicator found the ranks. A plan that thinks two ranks share a node
// when they do not would send their bytes as direct reads that cannot work (or, the other way
// round, cross the network for bytes a node already holds).
#pragma once

#include "core/base/status.h"
#include "core/layout/topology.h"
#include "core/runtime/communicator.h"

namespace ferry {

// For every peer of this rank: the topology's link class (same node or network) equals the
// communicator's (its host map, or the node_of_rank it was given). FailedPrecondition naming the
// first peer that disagrees, the node the topology gives each side and what the communicator
// found. The topology must cover the communicator's ranks.
Status CheckTopologyMatches(const Topology& topology, const Communicator& communicator);

}  // namespace ferry
