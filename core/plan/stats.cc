// Plan statistics, the lower bound and the cost model.
#include "core/plan/stats.h"

#include <algorithm>

namespace ferry {

LowerBound ComputeLowerBound(const NetworkDemand& demand, const Topology& topology) {
  LowerBound lb;
  const double node_bw = topology.NodeNetworkBandwidth();
  int64_t max_dst = 0;
  for (int64_t b : demand.destination_node_bytes) max_dst = std::max(max_dst, b);
  int64_t max_src = 0;
  for (int64_t b : demand.source_node_bytes) max_src = std::max(max_src, b);
  lb.destination_ingress_seconds = static_cast<double>(max_dst) / node_bw;
  double spread = demand.source_nodes > 0
                      ? static_cast<double>(demand.must_leave_bytes) / demand.source_nodes
                      : 0.0;
  lb.source_egress_seconds = std::max(static_cast<double>(max_src), spread) / node_bw;
  lb.seconds = std::max(lb.destination_ingress_seconds, lb.source_egress_seconds);
  return lb;
}

namespace {

// Bytes each rank moves outside the network totals of PlanStats, and the largest message.
struct RankTraffic {
  std::vector<int64_t> intra_in, intra_out, local, sent;
  int64_t largest_message = 0;
  double largest_message_seconds = 0;
};

// A Copy, Convert, Pack, Unpack or Quantize: the bytes it writes on its rank.
void AccountLocalOp(const TransferPlan& plan, const Op& op, PlanStats& s, RankTraffic& t) {
  int64_t bytes = 0;
  for (const CopyPair& c : plan.Copies(op)) bytes += c.to.NumBytes();
  t.local[op.rank] += bytes;
  if (op.kind == OpKind::kPack) s.pack_bytes += bytes;
  if (op.kind == OpKind::kUnpack) s.unpack_bytes += bytes;
  if (op.kind == OpKind::kCopy || op.kind == OpKind::kConvert) {
    s.bytes_by_link[static_cast<int>(LinkClass::kSameRank)] += bytes;
  }
}

// A Send or Forward: its bytes on its link, its ranks' and nodes' network traffic.
void AccountMessage(const Topology& topology, const Op& op, PlanStats& s, RankTraffic& t) {
  ++s.messages;
  ++t.sent[op.rank];
  const LinkClass link = topology.Link(op.rank, op.peer);
  s.bytes_by_link[static_cast<int>(link)] += op.bytes;
  double bw = topology.intra_node_bandwidth;
  if (link == LinkClass::kNetwork) {
    ++s.network_messages;
    s.rank_network_egress[op.rank] += op.bytes;
    s.rank_network_ingress[op.peer] += op.bytes;
    s.node_network_egress[topology.NodeOf(op.rank)] += op.bytes;
    s.node_network_ingress[topology.NodeOf(op.peer)] += op.bytes;
    bw = topology.nic_bandwidth;
  } else {
    t.intra_out[op.rank] += op.bytes;
    t.intra_in[op.peer] += op.bytes;
  }
  if (op.bytes > t.largest_message) {
    t.largest_message = op.bytes;
    t.largest_message_seconds = static_cast<double>(op.bytes) / bw;
  }
}

// The busiest resource's seconds: a node's network, a rank's NICs, its same-node links or its
// copy engine; fills the maxima of `s` on the way.
double BusiestResourceSeconds(const Topology& topology, const RankTraffic& t, PlanStats& s) {
  for (size_t node = 0; node < s.node_network_ingress.size(); ++node) {
    s.max_node_ingress = std::max(s.max_node_ingress, s.node_network_ingress[node]);
    s.max_node_egress = std::max(s.max_node_egress, s.node_network_egress[node]);
  }
  double busiest = static_cast<double>(std::max(s.max_node_ingress, s.max_node_egress)) /
                   topology.NodeNetworkBandwidth();
  for (size_t r = 0; r < s.rank_network_ingress.size(); ++r) {
    s.max_rank_ingress = std::max(s.max_rank_ingress, s.rank_network_ingress[r]);
    s.max_rank_egress = std::max(s.max_rank_egress, s.rank_network_egress[r]);
    const int nics = static_cast<int>(r) < topology.NumRanks()
                         ? std::max<int>(1, static_cast<int>(topology.ranks[r].nics.size()))
                         : 1;
    const double network = static_cast<double>(
        std::max(s.rank_network_ingress[r], s.rank_network_egress[r]));
    busiest = std::max(busiest, network / (topology.nic_bandwidth * nics));
    busiest = std::max(busiest, static_cast<double>(std::max(t.intra_in[r], t.intra_out[r])) /
                                    topology.intra_node_bandwidth);
    busiest = std::max(busiest, static_cast<double>(t.local[r]) / topology.copy_bandwidth);
  }
  return busiest;
}

// Longest chain of dependent messages: message depth of each op over deps and Send->Recv edges,
// in an order where every op follows its predecessors (Kahn over the same graph the validator
// checks; unmatched endpoints are ignored).
int LongestMessageChain(const TransferPlan& plan) {
  const int num_ops = static_cast<int>(plan.ops.size());
  std::vector<std::vector<int>> successors(num_ops);
  std::vector<int> indegree(num_ops, 0);
  for (const Op& op : plan.ops) {
    for (int dep : plan.Deps(op)) {
      if (dep >= 0 && dep < num_ops) {
        successors[dep].push_back(op.id);
        ++indegree[op.id];
      }
    }
  }
  for (const auto& [sender, receiver] : plan.MatchedMessages()) {
    successors[sender].push_back(receiver);
    ++indegree[receiver];
  }
  std::vector<int> depth(num_ops, 0);
  std::vector<int> ready;
  for (int i = 0; i < num_ops; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  int longest = 0;
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    const Op& op = plan.ops[i];
    const int d = depth[i] + (IsSenderKind(op.kind) ? 1 : 0);
    longest = std::max(longest, d);
    for (int next : successors[i]) {
      depth[next] = std::max(depth[next], d);
      if (--indegree[next] == 0) ready.push_back(next);
    }
  }
  return longest;
}

}  // namespace

PlanStats ComputePlanStats(const TransferPlan& plan, const Topology& topology,
                           const NetworkDemand* demand) {
  PlanStats s;
  const int n = plan.num_ranks;
  const int nodes = std::max(1, topology.NumNodes());
  s.rank_network_ingress.assign(n, 0);
  s.rank_network_egress.assign(n, 0);
  s.node_network_ingress.assign(nodes, 0);
  s.node_network_egress.assign(nodes, 0);
  RankTraffic t{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0),
                std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  s.ops = static_cast<int64_t>(plan.ops.size());
  for (const StagingSlot& slot : plan.slots) s.staging_bytes += slot.bytes;
  for (const Op& op : plan.ops) {
    if (IsSenderKind(op.kind)) {
      AccountMessage(topology, op, s, t);
    } else if (op.kind != OpKind::kRecv) {
      AccountLocalOp(plan, op, s, t);
    }
  }
  const double busiest = BusiestResourceSeconds(topology, t, s);
  const int64_t max_sent = n > 0 ? *std::max_element(t.sent.begin(), t.sent.end()) : 0;
  s.longest_message_chain = LongestMessageChain(plan);
  if (demand != nullptr) s.lower_bound = ComputeLowerBound(*demand, topology);
  s.predicted_seconds = busiest +
                        std::max(0, s.longest_message_chain - 1) * t.largest_message_seconds +
                        topology.network_latency * static_cast<double>(max_sent);
  return s;
}

}  // namespace ferry
