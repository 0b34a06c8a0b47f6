// Lower bound of a refit from the two layouts: union volumes of boxes per node and per GPU.
#include "tools/sim/lower_bound.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

namespace ferry::sim {
namespace {

bool PairwiseDisjoint(const std::vector<Box>& boxes) {
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (boxes[i].Intersects(boxes[j])) return false;
    }
  }
  return true;
}

// Counts covered cells of the compressed grid, recursing over dimensions.
int64_t GridVolume(const std::vector<Box>& boxes, const std::vector<std::vector<int64_t>>& coords,
                   int dim, std::vector<int>& active) {
  const int ndim = boxes[0].ndim;
  int64_t total = 0;
  const auto& cs = coords[dim];
  std::vector<int> inside;
  for (size_t c = 0; c + 1 < cs.size(); ++c) {
    inside.clear();
    for (int b : active) {
      if (boxes[b].lo[dim] <= cs[c] && cs[c + 1] <= boxes[b].hi[dim]) inside.push_back(b);
    }
    if (inside.empty()) continue;
    int64_t width = cs[c + 1] - cs[c];
    if (dim == ndim - 1) {
      total += width;
    } else {
      total += width * GridVolume(boxes, coords, dim + 1, inside);
    }
  }
  return total;
}

}  // namespace

int64_t UnionVolume(std::vector<Box> boxes) {
  boxes.erase(std::remove_if(boxes.begin(), boxes.end(), [](const Box& b) { return b.Empty(); }),
              boxes.end());
  if (boxes.empty()) return 0;
  std::sort(boxes.begin(), boxes.end());
  boxes.erase(std::unique(boxes.begin(), boxes.end()), boxes.end());
  if (PairwiseDisjoint(boxes)) {
    int64_t sum = 0;
    for (const Box& b : boxes) sum += b.Volume();
    return sum;
  }
  const int ndim = boxes[0].ndim;
  std::vector<std::vector<int64_t>> coords(ndim);
  for (int d = 0; d < ndim; ++d) {
    for (const Box& b : boxes) {
      coords[d].push_back(b.lo[d]);
      coords[d].push_back(b.hi[d]);
    }
    std::sort(coords[d].begin(), coords[d].end());
    coords[d].erase(std::unique(coords[d].begin(), coords[d].end()), coords[d].end());
  }
  std::vector<int> all(boxes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return GridVolume(boxes, coords, 0, all);
}

namespace {

// Volume of U(need) minus the part covered by U(have).
int64_t MissingVolume(const std::vector<Box>& need, const std::vector<Box>& have) {
  int64_t needed = UnionVolume(need);
  if (needed == 0 || have.empty()) return needed;
  std::vector<Box> overlap;
  for (const Box& n : need) {
    for (const Box& h : have) {
      Box i = n.Intersect(h);
      if (!i.Empty()) overlap.push_back(i);
    }
  }
  return needed - UnionVolume(std::move(overlap));
}

using BoxesByKey = std::unordered_map<int64_t, std::vector<Box>>;
int64_t Key(int group, int tensor) { return (static_cast<int64_t>(group) << 32) | tensor; }

}  // namespace

Result<LowerBound> ComputeLowerBound(const Layout& source, const Layout& destination,
                                     const ClusterSpec& cluster, const RankMapping& mapping) {
  const int gpn = cluster.gpus_per_node;
  auto gpu_of = [&](int rank) -> Result<int> {
    if (rank < 0 || rank >= static_cast<int>(mapping.gpu_of_rank.size())) {
      return InvalidArgument("rank " + std::to_string(rank) + " has no GPU in the mapping");
    }
    return mapping.gpu_of_rank[rank];
  };
  std::vector<int> src_tensor_of_dst(destination.tensors.size(), -1);
  for (size_t t = 0; t < destination.tensors.size(); ++t) {
    src_tensor_of_dst[t] = source.FindTensor(destination.tensors[t].name);
    if (src_tensor_of_dst[t] < 0) {
      return InvalidArgument("destination tensor '" + destination.tensors[t].name +
                             "' has no source");
    }
  }
  std::unordered_map<int, int> dst_tensor_of_src;
  for (size_t t = 0; t < destination.tensors.size(); ++t) {
    dst_tensor_of_src[src_tensor_of_dst[t]] = static_cast<int>(t);
  }
  BoxesByKey src_node, src_gpu, dst_node, dst_gpu;
  for (const Fragment& f : source.fragments) {
    auto it = dst_tensor_of_src.find(f.tensor);
    if (it == dst_tensor_of_src.end()) continue;
    FERRY_ASSIGN_OR_RETURN(int g, gpu_of(f.loc.rank));
    src_node[Key(g / gpn, it->second)].push_back(f.box);
    src_gpu[Key(g, it->second)].push_back(f.box);
  }
  for (const Fragment& f : destination.fragments) {
    FERRY_ASSIGN_OR_RETURN(int g, gpu_of(f.loc.rank));
    dst_node[Key(g / gpn, f.tensor)].push_back(f.box);
    dst_gpu[Key(g, f.tensor)].push_back(f.box);
  }
  static const std::vector<Box> kNone;
  auto missing_bytes = [&](const BoxesByKey& need, const BoxesByKey& have) {
    std::unordered_map<int, double> per_group;
    for (const auto& [key, boxes] : need) {
      auto it = have.find(key);
      int tensor = static_cast<int>(key & 0xffffffff);
      int64_t elems = MissingVolume(boxes, it == have.end() ? kNone : it->second);
      per_group[static_cast<int>(key >> 32)] +=
          static_cast<double>(elems) * DTypeSize(destination.tensors[tensor].dtype);
    }
    return per_group;
  };
  LowerBound lb;
  const double node_bw = cluster.EffectiveNicBandwidth() * cluster.nics_per_node;
  const double gpu_bw = cluster.EffectiveNvlinkBandwidth() +
                        cluster.EffectiveNicBandwidth() * cluster.nics_per_node / gpn;
  char text[256];
  double node_time = 0, gpu_time = 0;
  for (const auto& [node, bytes] : missing_bytes(dst_node, src_node)) {
    lb.total_network_bytes += bytes;
    if (bytes > lb.max_node_ingress_bytes) {
      lb.max_node_ingress_bytes = bytes;
      node_time = bytes / node_bw;
      std::snprintf(text, sizeof text, "node %d network ingress: %.2f GB at %.0f GB/s", node,
                    bytes / 1e9, node_bw / 1e9);
      lb.limit = text;
    }
  }
  std::string gpu_limit;
  for (const auto& [gpu, bytes] : missing_bytes(dst_gpu, src_gpu)) {
    if (bytes > lb.max_gpu_ingress_bytes) {
      lb.max_gpu_ingress_bytes = bytes;
      gpu_time = bytes / gpu_bw;
      std::snprintf(text, sizeof text, "gpu %d ingress: %.2f GB at %.0f GB/s (NVLink + NIC)", gpu,
                    bytes / 1e9, gpu_bw / 1e9);
      gpu_limit = text;
    }
  }
  if (gpu_time > node_time) lb.limit = gpu_limit;
  lb.seconds = std::max(node_time, gpu_time);
  if (lb.total_network_bytes > 0) lb.seconds += cluster.nic_latency + cluster.nic_message_overhead;
  if (lb.limit.empty()) lb.limit = "nothing to move";
  return lb;
}

}  // namespace ferry::sim
