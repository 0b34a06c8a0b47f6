// The physical lower bound of a refit on a cluster: every destination node must receive, through
// its NICs, the bytes its GPUs need that no GPU of that node already holds, and every destination
// GPU must receive the bytes it lacks through its NVLink and NIC ports. No plan can beat the larger
// of the two (plus one network message latency when anything crosses the network).
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/sim/cluster.h"

namespace ferry::sim {

struct LowerBound {
  double seconds = 0;
  double max_node_ingress_bytes = 0;  // network bytes into the busiest destination node
  double max_gpu_ingress_bytes = 0;   // bytes into the busiest destination GPU from elsewhere
  double total_network_bytes = 0;     // summed over destination nodes
  std::string limit;                  // which bound decided: "node 3 network ingress ..."
};

// Volume of the union of boxes (all of one tensor, same ndim).
int64_t UnionVolume(std::vector<Box> boxes);

// Tensors are matched by name; a destination tensor with no source is an error. Ranks of both
// layouts are plan ranks mapped to GPUs by `mapping`; `cluster` must already cover the mapping
// (FitClusterToMapping).
Result<LowerBound> ComputeLowerBound(const Layout& source, const Layout& destination,
                                     const ClusterSpec& cluster, const RankMapping& mapping);

}  // namespace ferry::sim
