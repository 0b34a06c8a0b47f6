// The planner: from a source Layout, a destination Layout and a Topology to a TransferPlan.
//
// Two strategies in the same IR:
//  * reshard (PlanReshard): take tensor stacks that both layouts describe alike as they are, and
//    fold families of same-shaped tensors that both layouts list member by member but store at a
//    constant stride (the experts of a layer) into stacked tensors (planner/fold_stacks.h), then
//    intersect fragments; each destination byte comes from one source replica chosen to balance
//    bytes per source rank and node (same rank -> Copy; a holder on the destination's node -> a
//    direct intra-node message; otherwise the network). Bytes that several GPUs of one
//    destination node need cross the network once, to a leader chosen by load, and fan out along
//    a chain inside the node (hierarchical routing); destination boxes that overlap without being
//    equal are first cut into cells that are equal or disjoint, so that this holds for each
//    distinct byte (planner/distinct_pieces.h). When the sources' egress bounds the
//    refit more than the destinations' ingress, chunks needed on several destination nodes are
//    relayed leader to leader instead of being sent again by a source. Large pieces are cut into
//    chunks (network_chunk_bytes; fanout_chunk_bytes for chains inside a node, relay_chunk_bytes
//    for chains relayed between nodes, so that they pipeline); small pieces bound for
//    the same peer are coalesced into one message (Pack -> Send -> Recv -> Unpack). Each sender's
//    messages are ordered in rounds that cycle through destination nodes, one message each, from a
//    rotated start (no incast, and any in-flight window keeps every destination node busy).
//  * gather-and-broadcast (PlanGatherBroadcast): the refit public RL stacks use today. Source rank
//    0 (the lowest source rank) gathers every tensor whole (the part of the trainers' all-gather
//    that reaches it, entering its node on every rail), packs tensors into buckets (bucket_bytes,
//    default NeMo RL's 1.6 GiB) and broadcasts each bucket, pipelined in chunks of
//    broadcast_chunk_bytes as NCCL's ring does: out of the root's node through the channel's GPU
//    and NIC, then a chain of node leaders across nodes (the leader, hence the rail, rotates per
//    chunk) and a chain inside each node; every destination rank keeps its slice.
//
// Layouts that describe a family differently, one as a tensor stack and the other member by
// member (core/layout/tensor_stack.h), are planned (both strategies) after the layout with fewer
// fragments is rewritten: its members stacked, or its stacks expanded (both layouts expanded as a
// last resort); the plan moves the same bytes, only the rewrite costs time.
//
// Planning is deterministic (no hashing of pointers, no unordered iteration, stable sorts), so each
// rank can plan locally and get the same plan. Functions are thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "core/plan/plan.h"
#include "core/plan/stats.h"
#include "planner/options.h"

namespace ferry {

enum class Strategy { kReshard, kGatherBroadcast };
std::string_view StrategyName(Strategy strategy);  // "reshard", "gather-broadcast"
Result<Strategy> ParseStrategy(std::string_view name);

// Wall time of the reshard planner's passes, in seconds (zero for gather-and-broadcast): where a
// slow plan spends its time, without a profiler.
struct PlanPhaseSeconds {
  double fold = 0;       // tensor stacks: the agreement check, any rewrite of a layout, and
                         // stack folding (planner/fold_stacks.h), whether or not it applied
  double intersect = 0;  // fragment intersection (IntersectLayouts) and the demand
  double route = 0;      // local copies, intra-node and network deliveries, trees, chunks
  double select = 0;     // source selection
  double order = 0;      // messages and rounds
  double emit = 0;       // ops, copy pairs and staging slots
};

struct PlanResult {
  TransferPlan plan;
  NetworkDemand demand;  // what the layouts force onto the network (for the lower bound)
  PlanPhaseSeconds phases;
  // Reshard: tensor families planned as stacked tensors (planner/fold_stacks.h); 0 when the
  // layouts were planned as given.
  int stacks = 0;
};

// Both refuse layouts that store a tensor transformed (StoredTransform, core/layout/layout.h),
// naming the tensor and its transform: a plan copies bytes as they are. The exceptions are
// destination transforms the planner applies on the destination rank, after delivering the
// source's values into staging there: an element function (vLLM's Mamba A = -exp(A_log) in fp32;
// both strategies) in a Convert op whose pair carries it (planner/element_transforms.h), and
// PlanReshard's block-scaled fp8 destination (Layout::block_scaled) in Quantize ops
// (planner/block_quantize.h; the gather-and-broadcast baseline refuses it).
Result<PlanResult> PlanReshard(const Layout& source, const Layout& destination,
                               const Topology& topology, const PlannerOptions& options = {});
Result<PlanResult> PlanGatherBroadcast(const Layout& source, const Layout& destination,
                                       const Topology& topology,
                                       const PlannerOptions& options = {});
Result<PlanResult> MakePlan(Strategy strategy, const Layout& source, const Layout& destination,
                            const Topology& topology, const PlannerOptions& options = {});

}  // namespace ferry
