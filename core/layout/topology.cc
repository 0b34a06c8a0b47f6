// Topology helpers.
#include "core/layout/topology.h"

#include <algorithm>

namespace ferry {

std::string_view LinkClassName(LinkClass link) {
  switch (link) {
    case LinkClass::kSameRank: return "same_rank";
    case LinkClass::kSameNode: return "same_node";
    case LinkClass::kNetwork: return "network";
  }
  return "unknown";
}

Result<LinkClass> ParseLinkClass(std::string_view name) {
  for (LinkClass l : {LinkClass::kSameRank, LinkClass::kSameNode, LinkClass::kNetwork}) {
    if (LinkClassName(l) == name) return l;
  }
  return InvalidArgument("unknown link class '" + std::string(name) +
                         "' (expected same_rank, same_node or network)");
}

Topology Topology::Uniform(int num_ranks, int gpus_per_node) {
  Topology t;
  gpus_per_node = std::max(1, gpus_per_node);
  t.ranks.resize(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    t.ranks[r].node = r / gpus_per_node;
    t.ranks[r].local_device = r % gpus_per_node;
    t.ranks[r].nics = {r % gpus_per_node};
  }
  return t;
}

int Topology::NumNodes() const {
  int n = 0;
  for (const RankPlacement& p : ranks) n = std::max(n, p.node + 1);
  return n;
}

LinkClass Topology::Link(int from, int to) const {
  if (from == to) return LinkClass::kSameRank;
  if (ranks[from].node == ranks[to].node) return LinkClass::kSameNode;
  return LinkClass::kNetwork;
}

int Topology::NicsPerNode() const {
  int n = 1;
  for (const RankPlacement& p : ranks) {
    for (int nic : p.nics) n = std::max(n, nic + 1);
  }
  return n;
}

}  // namespace ferry
