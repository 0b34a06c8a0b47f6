// ComputeDemand: bytes each destination node must receive and each source node must send.
#include "planner/demand.h"

#include <algorithm>
#include <vector>

namespace ferry {

NetworkDemand ComputeDemand(const Intersection& inter, const PlanFacts& facts, int num_nodes) {
  const std::vector<int>& node_of = facts.node_of_rank;
  NetworkDemand demand;
  demand.destination_node_bytes.assign(num_nodes, 0);
  demand.source_node_bytes.assign(num_nodes, 0);
  {
    std::vector<char> holder_node(num_nodes, 0);
    for (int rank : facts.source_rank) {
      if (rank >= 0) holder_node[node_of[rank]] = 1;  // a fragment stack folding took reads -1
    }
    demand.source_nodes = static_cast<int>(std::count(holder_node.begin(), holder_node.end(), 1));
  }
  HolderMarks holders(inter, facts, static_cast<int>(facts.node_of_rank.size()), num_nodes);
  std::vector<int> needed(num_nodes, -1);  // piece index that last counted the node
  for (size_t p = 0; p < inter.pieces.size(); ++p) {
    const Piece& piece = inter.pieces[p];
    const FragmentGroup& g = inter.groups[piece.group];
    const int64_t bytes = facts.piece_bytes[p];
    holders.Mark(piece);
    bool must_leave = false;
    for (int i = g.frags_begin; i < g.frags_end; ++i) {
      const int node = node_of[facts.destination_rank[inter.group_frags[i]]];
      if (holders.HeldOnNode(node) || needed[node] == static_cast<int>(p)) continue;
      needed[node] = static_cast<int>(p);
      demand.destination_node_bytes[node] += bytes;
      must_leave = true;
    }
    if (must_leave) {
      demand.must_leave_bytes += bytes;
      if (holders.HolderNodes() == 1) demand.source_node_bytes[holders.OnlyNode()] += bytes;
    }
  }
  return demand;
}

}  // namespace ferry
