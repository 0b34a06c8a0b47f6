// The gather-and-broadcast baseline (PlanGatherBroadcast): the refit public RL stacks use today,
// planned in ferry's IR so that both can be compared on the same executor and simulator. Internal
// to //planner.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "planner/planner.h"

namespace ferry {

// Source rank 0 (the lowest source rank) gathers every tensor whole, packs tensors into buckets
// (bucket_bytes) and broadcasts each bucket, pipelined in chunks of broadcast_chunk_bytes: a
// chain of node leaders across nodes (the leader, hence the rail, rotates per chunk) and a chain
// inside each node; every destination rank receives the whole bucket and keeps its slice. The
// layouts' tensor stacks must agree (core/layout/tensor_stack.h).
Result<PlanResult> PlanGatherBroadcastOf(const Layout& source, const Layout& destination,
                                         const Topology& topology, const PlannerOptions& options);

}  // namespace ferry
