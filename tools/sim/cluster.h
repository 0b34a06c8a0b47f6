// Cluster model for the simulator: the hardware a TransferPlan is replayed on (GPUs grouped into
// NVLink domains called nodes, NICs and rails, NVLink, PCIe and host staging, copy and pack
// throughput), the built-in presets, loading from YAML, and the mapping from plan ranks to GPUs.
//
// Units everywhere: bytes, bytes per second (one direction), seconds.
// A "node" is one NVLink domain: a DGX H100 box (8 GPUs) or a whole GB200 NVL72 rack (72 GPUs).
// ClusterSpec is a plain value; reading it is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/layout/topology.h"
#include "tools/sim/convert_rates.h"
#include "tools/sim/row_rates.h"

namespace ferry::sim {

// Most processes a cluster file may put on one GPU.
inline constexpr int kMaxRanksPerGpu = 64;
// Most cores a cluster file may give a node (host_cores).
inline constexpr int kMaxHostCores = 4096;
// The most copy threads the executor starts by default (executor.copy_threads 0: one per hardware
// thread, at most this many; core/runtime/executor.cc).
inline constexpr int kExecutorDefaultCopyThreadsMax = 8;

struct ClusterSpec {
  std::string name;
  std::string description;

  // Shape. num_nodes == 0 means "as many nodes as the plan needs".
  int gpus_per_node = 8;  // GPUs in one NVLink domain
  int gpus_per_tray = 0;  // GPUs per board/tray (informational; GB200: 4); 0 = gpus_per_node
  int num_nodes = 0;
  int nics_per_node = 8;  // GPU g uses NIC g * nics_per_node / gpus_per_node (rail-aligned)
  // Processes sharing each GPU, time-sliced (the lent one-GPU machine runs every rank on GPU 0):
  // a node holds gpus_per_node * ranks_per_gpu plan ranks, consecutive ranks on one GPU. With more
  // than one, CUDA runs the processes' kernels in turns, so a kernel slower than a copy holds the
  // whole GPU for its time (docs/simulator.md, "Model").
  int ranks_per_gpu = 1;

  // Network (inter-node), per NIC per direction.
  double nic_bandwidth = 50e9;
  double nic_latency = 3e-6;           // one-way wire + switch latency of a message
  double nic_message_overhead = 4e-6;  // per-message posting / rendezvous cost before data flows
  double network_efficiency = 1.0;     // achieved fraction of nic_bandwidth
  bool rail_optimized = true;          // same-rail NICs meet at a leaf switch
  double cross_rail_latency = 1e-6;    // extra switch hops for traffic between different rails
  // Uplink of a node into the spine, per direction, used by cross-rail traffic. 0 = non-blocking.
  double spine_bandwidth_per_node = 0;

  // NVLink (intra-node), per GPU per direction.
  double nvlink_bandwidth = 450e9;
  double nvlink_latency = 2e-6;
  double nvlink_message_overhead = 3e-6;
  double nvlink_efficiency = 1.0;

  // GPU memory: device-to-device copies (copy engines) and pack/unpack/convert kernels.
  double copy_bandwidth = 1.6e12;   // bytes copied per second per GPU
  double pack_bandwidth = 1.2e12;   // bytes packed/unpacked per second per kernel
  // Bytes of fp8 and scales a Quantize kernel writes per second (it reads bf16, twice as many bytes,
  // and reduces each 128x128 block): the H200's measured rate by default.
  double quantize_bandwidth = 1.09e12;
  // Bytes a kernel converting into fp8 (e4m3 or e5m2: a saturating cast per element) moves per
  // second, counted as a copy's, (read + written) / 2: a Convert, Pack or Unpack writing fp8 and a
  // direct read that narrows to fp8. Other conversions run at pack_bandwidth. The H200's measured
  // rate scaled to copy_bandwidth's default.
  double fp8_convert_bandwidth = 1.54e12;
  double kernel_overhead = 5e-6;    // launch cost of one Copy/Pack/Unpack/Convert/Quantize op

  // CPU lanes: per-rank FIFO servers an op holds for a fixed time before its data moves (not
  // bandwidth links; the simulator keeps each lane's next free time).
  // Posting: each rank's executor posts its ops from one thread (core/runtime/rank_run.cc), so
  // every op occupies its rank's posting lane this long before it starts: a local op when it is
  // ready, a receive when it is ready, a send when its window slot is granted. 0: no lane.
  double op_post_overhead = 0;
  // Weight loading of the gather-and-broadcast consumer: NeMo RL hands each received bucket to
  // vLLM's load_weights one tensor at a time on the engine's one Python thread
  // (NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py, post_unpack_func), so each baseline Unpack
  // into destination memory occupies its rank's load lane this long per tensor it unpacks. The
  // reshard writes in place and loads nothing. 0: no lane.
  double tensor_load_overhead = 0;

  // Host side: used when the NIC cannot reach GPU memory (gpu_direct = false) or ranks live in
  // host memory (host_memory_ranks = true).
  bool gpu_direct = true;
  double pcie_bandwidth = 50e9;          // per GPU per direction
  double host_memory_bandwidth = 200e9;  // per node, shared by everything touching host memory
  int64_t staging_chunk_bytes = 4 << 20;  // host staging pipelines in chunks of this size
  // Ranks are processes using host memory (no GPU): copies and same-node messages go through
  // host memory at host_copy_bandwidth per stream, sharing host_memory_bandwidth.
  bool host_memory_ranks = false;
  double host_copy_bandwidth = 10e9;
  // Messages between host-memory ranks of one node share this much per node, whatever the number
  // of streams: a transport whose CPU work, not memory, is the limit (TCP loopback through the
  // kernel on a few cores). 0: no limit beyond host_copy_bandwidth and host_memory_bandwidth
  // (direct reads, one memcpy a message).
  double host_message_bandwidth = 0;
  // Each host-memory rank's messages, the ones it sends and the ones it receives together, at most
  // this rate: the transport's one progress thread a process (transports/tcp/tcp_transport.cc,
  // one epoll loop driven by the executor thread) makes the kernel's copies of every connection
  // of the rank, so one stream alone gets this, below what several pairs get together, and a
  // rank that receives and forwards at once (a broadcast chain's relay) gets it for both. 0: no
  // limit beyond host_copy_bandwidth.
  double host_message_stream_bandwidth = 0;
  // Host-memory ranks only: one copy stream's rate by the row length and pitch of what it copies
  // (tools/sim/row_rates.h), measured with the executor's copy loop; only its ratios matter. When
  // set, each op that copies (Copy, Pack, Unpack, Convert, a direct read's copy) takes each of
  // its bytes `slowdown` times on its links, the time its copies take at these rates over the
  // time at the table's contiguous rate (tools/sim/host_copy_rates.h): alone it copies at
  // host_copy_bandwidth / slowdown, and it holds host_mem that much longer a byte. Empty: every
  // byte of every stream alike.
  std::vector<RowRate> host_copy_row_rates;
  // Host-memory ranks only, with host_copy_row_rates: one copy stream's rate converting between two
  // dtypes, in source bytes a second (tools/sim/convert_rates.h), measured with the executor's
  // conversion loop beside the row table; only its ratio to the row table's contiguous rate
  // matters. A copy pair that converts a listed pair takes its source bytes at this rate instead
  // of its row pattern's (host_copy_rates.h). Empty, or a pair not listed: conversions cost what
  // copies of the same rows do.
  std::vector<ConvertRate> host_convert_rates;
  // Host-memory ranks only, with host_copy_row_rates: one copy thread's rate quantizing values into
  // block-scaled fp8 (a Quantize op), in bytes of values read a second, measured with the
  // executor's quantizer beside the row table (BM_ExecutorQuantize, one thread, float32 scales);
  // only its ratio to the row table's contiguous rate matters (with host_cores, both rates as
  // measured: a core's rate is the table's contiguous one). 0: a Quantize costs what a copy of
  // its bytes does.
  double host_quantize_rate = 0;
  // Host-memory ranks only, with host_quantize_rate: the cores a node's ranks run on. The executor
  // spreads a Quantize op's blocks over its copy threads (one per hardware thread, at most 8:
  // core/runtime/copy_pool.h), and quantizing costs each byte tens of times a copy's CPU time, so
  // it is bound by the cores, not the memory: with host_cores set, a Quantize op takes the node's
  // host_cpu link instead of host_mem, its values at host_quantize_rate a core (the rate as
  // measured, against the table's contiguous rate as measured in the same run), alone on
  // min(host_cores, 8) cores, the node's Quantize ops sharing host_cores of them. 0: a Quantize
  // shares host_mem as copies do, one core's rate for the node.
  int host_cores = 0;

  int TotalGpus() const { return gpus_per_node * num_nodes; }
  int RanksPerNode() const { return gpus_per_node * ranks_per_gpu; }
  int NicOfLocalGpu(int local_gpu) const;
  // Effective capacities (bandwidth times efficiency).
  double EffectiveNicBandwidth() const { return nic_bandwidth * network_efficiency; }
  double EffectiveNvlinkBandwidth() const { return nvlink_bandwidth * nvlink_efficiency; }

  // Checks every field for sane values; the error names the field.
  Status Validate() const;
  // Multi-line human-readable summary (shape and the headline bandwidths).
  std::string Summary() const;
};

// Names of the built-in presets: "dgx-h100", "dgx-h200", "gb200-nvl72", "efa-h100".
std::vector<std::string> ClusterPresetNames();
// A preset by name; NotFound lists the known names.
Result<ClusterSpec> ClusterPreset(std::string_view name);

// Parses a cluster YAML document. Keys are ClusterSpec field names; `base: <preset>` starts from a
// preset. Bandwidths accept "400Gb/s", "50GB/s", "50e9" (bytes/s); times accept "5us", "2ms",
// "1e-6" (seconds); sizes accept "4MiB", "1GB", "4194304". Unknown keys are errors.
// host_copy_row_rates is a list of [row size, pitch size, bandwidth] points, e.g.
// `- [64B, 128B, 4.9GB/s]`, ordered by row and then by pitch; host_convert_rates a list of
// [from dtype, to dtype, bandwidth] entries, e.g. `- [bf16, fp8_e4m3, 3.4GB/s]`.
Result<ClusterSpec> ParseClusterYaml(std::string_view yaml_text);
// A preset name, or a path to a YAML file of at most kMaxClusterFileBytes.
inline constexpr int64_t kMaxClusterFileBytes = int64_t{16} << 20;
Result<ClusterSpec> LoadCluster(std::string_view preset_or_path);

// Quantity parsers used by the YAML loader (exposed for tests and the CLI).
Result<double> ParseBandwidth(std::string_view text);  // -> bytes/s
Result<double> ParseDuration(std::string_view text);   // -> seconds
Result<int64_t> ParseSize(std::string_view text);      // -> bytes

// Where each plan rank runs: gpu_of_rank[r] is a global GPU index, node = gpu / gpus_per_node.
struct RankMapping {
  std::vector<int> gpu_of_rank;

  // Rank r on GPU r.
  static RankMapping Identity(int num_ranks);
  // Rank r on GPU node * gpus_per_node + local_device / ranks_per_gpu from the plan's Topology.
  static Result<RankMapping> FromTopology(const Topology& topology, const ClusterSpec& cluster);
};

// Resolves num_nodes == 0 to the number of nodes the mapping needs and checks the mapping fits.
Result<ClusterSpec> FitClusterToMapping(ClusterSpec cluster, const RankMapping& mapping);

// A Topology for the planner that matches the cluster: RanksPerNode() ranks a node, each with its
// GPU's NIC (rail-aligned).
Topology TopologyForCluster(const ClusterSpec& cluster, int num_ranks);

}  // namespace ferry::sim
