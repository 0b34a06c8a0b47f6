// Topology: where each rank lives (node, local GPU, NICs) and the link classes and bandwidths
// between ranks. The planner and the simulator read it; transports are chosen per link class.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ferry {

enum class LinkClass : uint8_t {
  kSameRank,  // source and destination are the same process/GPU: a local copy
  kSameNode,  // same node: NVLink / shared memory / CUDA IPC
  kNetwork,   // different nodes: RDMA NICs or TCP
};

std::string_view LinkClassName(LinkClass link);  // "same_rank", "same_node", "network"
Result<LinkClass> ParseLinkClass(std::string_view name);

struct RankPlacement {
  int node = 0;
  int local_device = 0;   // GPU index on its node
  std::vector<int> nics;  // NIC indices on its node this rank may use (rail-aligned: {local_device})
};

struct Topology {
  std::vector<RankPlacement> ranks;  // indexed by global rank

  // Bandwidths in bytes per second, one direction.
  double nic_bandwidth = 50e9;       // per NIC (400 Gb/s InfiniBand)
  double intra_node_bandwidth = 450e9;  // per GPU (NVLink 4)
  double copy_bandwidth = 2000e9;    // device-local copy (read + write counted once)
  double network_latency = 5e-6;     // seconds per message

  // `num_ranks` ranks, `gpus_per_node` per node, rank r on node r / gpus_per_node, one NIC per GPU.
  static Topology Uniform(int num_ranks, int gpus_per_node);

  int NumRanks() const { return static_cast<int>(ranks.size()); }
  int NumNodes() const;
  int NodeOf(int rank) const { return ranks[rank].node; }
  LinkClass Link(int from, int to) const;
  // NICs per node (max over ranks of nic index + 1); at least 1.
  int NicsPerNode() const;
  // Ingress or egress bandwidth of a whole node over the network.
  double NodeNetworkBandwidth() const { return nic_bandwidth * NicsPerNode(); }
};

}  // namespace ferry
