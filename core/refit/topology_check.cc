// CheckTopologyMatches: the plan's topology against the communicator's host map.
#include "core/refit/topology_check.h"

#include <string>

namespace ferry {

Status CheckTopologyMatches(const Topology& topology, const Communicator& communicator) {
  const int rank = communicator.rank();
  if (topology.NumRanks() < communicator.size()) {
    return FailedPrecondition("the plan's topology has " + std::to_string(topology.NumRanks()) +
                              " ranks but the session has " + std::to_string(communicator.size()));
  }
  for (int peer = 0; peer < communicator.size(); ++peer) {
    if (peer == rank) continue;
    const LinkClass planned = topology.Link(rank, peer);
    const LinkClass found = communicator.LinkTo(peer);
    if (planned == found) continue;
    return FailedPrecondition(
        "rank " + std::to_string(peer) + " disagrees with the plan's topology: the plan puts it on node " +
        std::to_string(topology.NodeOf(peer)) + " and rank " + std::to_string(rank) + " on node " +
        std::to_string(topology.NodeOf(rank)) + " (" + std::string(LinkClassName(planned)) +
        "), but the communicator finds them " +
        (found == LinkClass::kSameNode ? "on the same host" : "on different hosts") +
        "; plan with the cluster's real placement (--gpus-per-node, a topology file)");
  }
  return Status::Ok();
}

}  // namespace ferry
