// SelectSources: least-loaded holders, largest deliveries first.
#include "planner/select_sources.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ferry {
namespace {

// A candidate sender: its rank, that rank's local device and node.
struct Candidate {
  int rank, device, node;
};

// Bytes sent so far, per rank (over the network and inside nodes) and per node (network).
struct SenderLoads {
  std::vector<int64_t> net_out, intra_out, node_out;
};

// The candidate of [first, last) with the least intra-node load.
const Candidate* LeastIntraLoaded(const Candidate* first, const Candidate* last,
                                  const SenderLoads& loads) {
  const Candidate* best = first;
  for (const Candidate* c = first + 1; c < last; ++c) {
    if (loads.intra_out[c->rank] < loads.intra_out[best->rank]) best = c;
  }
  return best;
}

// The candidate of [first, last) of the lowest score, the network load plus a penalty off the
// leader's rail; on a tie, of the lower node load.
const Candidate* LeastNetworkLoaded(const Candidate* first, const Candidate* last,
                                    const SenderLoads& loads, int leader_device, int64_t bytes) {
  const int64_t off_rail_penalty = bytes / 64 + 1;
  auto score = [&](const Candidate* c) {
    return loads.net_out[c->rank] + (c->device != leader_device ? off_rail_penalty : 0);
  };
  const Candidate* best = first;
  int64_t best_score = score(best);
  for (const Candidate* c = first + 1; c < last; ++c) {
    const int64_t s = score(c);
    if (s > best_score) continue;
    if (s < best_score || loads.node_out[c->node] < loads.node_out[best->node]) {
      best = c;
      best_score = s;
    }
  }
  return best;
}

}  // namespace

void SelectSources(const Intersection& inter, const PlanFacts& facts, const Topology& topology,
                   const TreeTable& trees, int num_ranks, int num_nodes, Routes& routes) {
  std::vector<Delivery>& deliveries = routes.deliveries;
  const int num_holders = static_cast<int>(inter.holders.size());
  // Candidate number c: a piece holder, or past them a same-node holder.
  auto candidate = [&](int c) {
    return c < num_holders ? inter.holders[c] : routes.intra_pool[c - num_holders];
  };
  std::vector<int> device_of(num_ranks);
  for (int r = 0; r < num_ranks; ++r) device_of[r] = topology.ranks[r].local_device;
  std::vector<Candidate> cands(static_cast<size_t>(num_holders) + routes.intra_pool.size());
  for (size_t c = 0; c < cands.size(); ++c) {
    const int rank = facts.source_rank[candidate(static_cast<int>(c))];
    cands[c] = {rank, device_of[rank], facts.node_of_rank[rank]};
  }
  SenderLoads loads{std::vector<int64_t>(num_ranks, 0), std::vector<int64_t>(num_ranks, 0),
                    std::vector<int64_t>(num_nodes, 0)};
  auto assign = [&](Delivery& d, const Candidate* c) {
    d.sender_frag = candidate(static_cast<int>(c - cands.data()));
    if (d.cand_begin >= num_holders) {
      loads.intra_out[c->rank] += d.bytes;
    } else {
      loads.net_out[c->rank] += d.bytes;
      loads.node_out[c->node] += d.bytes;
    }
  };
  std::vector<int> flexible;  // deliveries of several candidates, in index order
  for (size_t i = 0; i < deliveries.size(); ++i) {
    Delivery& d = deliveries[i];
    if (d.cand_end - d.cand_begin > 1) {
      flexible.push_back(static_cast<int>(i));
    } else {
      assign(d, cands.data() + d.cand_begin);
    }
  }
  std::stable_sort(flexible.begin(), flexible.end(),
                   [&](int a, int b) { return deliveries[a].bytes > deliveries[b].bytes; });
  for (int di : flexible) {
    Delivery& d = deliveries[di];
    const Candidate* first = cands.data() + d.cand_begin;
    const Candidate* last = cands.data() + d.cand_end;
    if (d.cand_begin >= num_holders) {
      assign(d, LeastIntraLoaded(first, last, loads));
    } else {
      assign(d, LeastNetworkLoaded(first, last, loads, device_of[trees.Rank(d.tree, 0)], d.bytes));
    }
  }
}

}  // namespace ferry
