// Plan statistics and the cost model: bytes per link class, per-rank and per-node network
// ingress/egress, message counts, the physical lower bound and a predicted time.
//
// Cost model (documented in docs/planner.md): every resource works in parallel and the slowest one
// decides, plus the time to fill the longest pipeline of dependent messages:
//   resource time = max( node network ingress/egress bytes / (nic_bandwidth * NICs per node),
//                        rank network ingress/egress bytes / (nic_bandwidth * NICs of the rank),
//                        rank same-node ingress/egress bytes / intra_node_bandwidth,
//                        rank local copy bytes (Copy/Pack/Unpack/Convert) / copy_bandwidth )
//   predicted     = resource time
//                 + (longest chain of dependent messages - 1) * largest message / its link bandwidth
//                 + network_latency * most messages sent by one rank
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/layout/topology.h"
#include "core/plan/plan.h"

namespace ferry {

// What the layouts force onto the network, independent of any plan (computed by the planner from
// the fragment intersection): the physical limit the plan is measured against.
struct NetworkDemand {
  // Per node: bytes the node's destination GPUs need that no source on the node holds, each
  // distinct byte counted once per node.
  std::vector<int64_t> destination_node_bytes;
  // Per node: bytes that only this node's sources hold and some other node needs.
  std::vector<int64_t> source_node_bytes;
  // Bytes that must leave their source node at least once (needed on a node without a holder).
  int64_t must_leave_bytes = 0;
  // Nodes that hold at least one source fragment needed elsewhere.
  int source_nodes = 0;
};

struct LowerBound {
  double destination_ingress_seconds = 0;  // max over nodes of needed bytes / node bandwidth
  double source_egress_seconds = 0;        // max(forced per node, total / all source nodes)
  double seconds = 0;                      // the larger of the two
};
LowerBound ComputeLowerBound(const NetworkDemand& demand, const Topology& topology);

struct PlanStats {
  int64_t ops = 0;
  int64_t messages = 0;  // Send + Forward ops
  int64_t network_messages = 0;
  // Payload bytes by LinkClass (index = static_cast<int>(LinkClass)); same_rank counts Copy ops.
  std::array<int64_t, 3> bytes_by_link{};
  int64_t pack_bytes = 0;    // bytes gathered into staging slots (Pack)
  int64_t unpack_bytes = 0;  // bytes scattered out of staging slots (Unpack)
  int64_t staging_bytes = 0; // sum of staging slot sizes
  // Network bytes per rank and per node (indexed by rank / node).
  std::vector<int64_t> rank_network_ingress, rank_network_egress;
  std::vector<int64_t> node_network_ingress, node_network_egress;
  int64_t max_rank_ingress = 0, max_rank_egress = 0;
  int64_t max_node_ingress = 0, max_node_egress = 0;
  int longest_message_chain = 0;
  LowerBound lower_bound;
  double predicted_seconds = 0;
};

// Computes the statistics of `plan` on `topology` (which must cover plan.num_ranks ranks).
// `demand` feeds the lower bound; pass nullptr to leave it zero.
PlanStats ComputePlanStats(const TransferPlan& plan, const Topology& topology,
                           const NetworkDemand* demand);

}  // namespace ferry
