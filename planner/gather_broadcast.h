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
// source has no tensor stacks (UnstackTensors); the destination's stand for their members
// (core/layout/tensor_stack.h), which buckets may separate.
//
// As NeMo RL runs it (NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py packed_broadcast_producer,
// megatron_policy_worker.py broadcast_weights_for_collective): every trainer rank exports full
// tensors through Megatron's PP broadcasts and TP/EP all-gathers, so the bytes rank 0 lacks enter
// its node on every GPU's rail, not through rank 0's NIC alone. Here a piece held on another node
// crosses the network to the root node's GPU on the holder's rail and is forwarded to rank 0 over
// NVLink. The broadcast is NCCL's ring (broadcast has no other algorithm: NVIDIA/nccl
// src/graph/tuning.cc; src/device/broadcast.h), one ring per channel, each leaving a node through
// its own GPU and NIC: chunk c leaves the root's node through the GPU on channel c's rail.
// The plan only: its PlanResult::demand is left empty (PlanGatherBroadcast fills it).
Result<PlanResult> PlanGatherBroadcastOf(const Layout& source, const Layout& destination,
                                         const Topology& topology, const PlannerOptions& options);

}  // namespace ferry
