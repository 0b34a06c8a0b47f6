// The discrete-event simulator: replays a TransferPlan on a ClusterSpec and predicts when every op
// finishes.
//
// Model. Every op becomes an activity that needs a set of links (resources with a capacity in
// bytes/s) for `bytes` plus its fixed start-up cost (charged as time on those links, so fixed costs
// of ops sharing a link add up), before a fixed latency:
//   Copy                  gpu_mem[g] at copy_bandwidth (host_mem[node] for host-memory ranks)
//   Pack/Unpack/Convert   gpu_mem[g], each kernel capped at pack_bandwidth (a Convert applying an
//                         element function, Mamba's -exp, too: memory-bound like any); writing
//                         fp8 from a wider dtype, (read + written) / 2 bytes at most
//                         fp8_convert_bandwidth
//   Quantize              gpu_mem[g], a byte written taking (source element bytes + 1) / 2 of it,
//                         each kernel writing at most quantize_bandwidth; with quantizing direct
//                         reads only the blocks no read quantized (SimOptions::quantizing_reads)
//   Send|Forward + Recv   one flow per matched message (same `message` id), started when both the
//                         sender and the receiver are ready (their deps completed):
//                           same GPU     gpu_mem[g]
//                           same node    nvlink_out[src gpu] + nvlink_in[dst gpu]; between
//                                        host-memory ranks host_mem[node] (+ loopback[node] when
//                                        host_message_bandwidth is set: the transport's own limit;
//                                        + transport_thread[rank] of both ends when
//                                        host_message_stream_bandwidth is set)
//                           network      nic_tx[src nic] + nic_rx[dst nic] (+ spine_up/spine_down
//                                        for cross-rail traffic when the spine is oversubscribed;
//                                        + pcie and host_mem on both ends, and one staging chunk
//                                        of store-and-forward delay per end, without GPUDirect)
// On a GPU that several ranks (processes) share, CUDA runs their kernels in turns: a kernel capped
// below the GPU's copy rate takes that rate / its cap of gpu_mem's service a byte instead, so
// kernels of different processes share the GPU's time rather than each running at its cap.
// A GPU rank's kernels (its local ops' and, as a receiver, its direct reads') run one launch at a
// time on its executor's one CUDA stream, in the order they were made (kernel_stream.h): a kernel
// flow waits until the launches before it have finished; reads that reach the stream at one
// instant are one launch and move side by side.
// A host-memory rank's copy stream (a Copy, Pack, Unpack, Convert or direct read), with the
// cluster's host_copy_row_rates, takes each of its bytes `slowdown` times on its links: its
// rows' rate against contiguous bytes (host_copy_rates.h), so alone it copies at
// host_copy_bandwidth / slowdown and, sharing host_mem, holds the node's cores that much longer.
// Flows share each link max-min fairly (progressive filling). Rates are recomputed once per batch of
// flow starts/finishes (all those within `rate_batch_window` of the first), only for the flows on
// the links they touch that the batch cannot absorb within `rate_slack` (a new class, a link over
// capacity, or idle capacity beyond the slack where some class is limited), then propagated to the
// links of the flows whose rate dropped (`propagation_rounds` times, each within
// `propagation_budget` flow classes) — never globally per event. A Forward can only start after
// the Recv it depends on finished, so relays are store-and-forward per chunk. An op also waits, as
// in the executor, until its rank can place its staging slots within the staging budget
// (staging_gate.h). Two CPU lanes per rank, FIFO servers rather than links, delay ops before
// their data moves: the posting lane (ClusterSpec::op_post_overhead: every op, a receive when
// ready, a send when its window slot is granted) and, for the gather-and-broadcast baseline, the
// consumer's weight-loading lane (ClusterSpec::tensor_load_overhead a tensor of each Unpack into
// destination memory).
//
// Simulate() is a pure function of its inputs; it is thread-safe and allocates its own state. Its
// one side effect is the progress it publishes, when asked (SimOptions::progress).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/runtime/executor_options.h"
#include "tools/sim/cluster.h"

namespace ferry::sim {

enum class ResourceKind : uint8_t {
  kGpuMem,
  kNvlinkOut,
  kNvlinkIn,
  kNicTx,
  kNicRx,
  kSpineUp,
  kSpineDown,
  kPcieD2H,
  kPcieH2D,
  kHostMem,
  kLoopback,  // per node: messages between host-memory ranks of one node (host_message_bandwidth)
  // Per rank of a host-memory cluster with host_message_stream_bandwidth: the transport's one
  // progress thread, which carries every message the rank sends and receives.
  kTransportThread,
  // Per node of a host-memory cluster with host_cores: the cores its Quantize ops share.
  kHostCpu,
};
inline constexpr int kNumResourceKinds = 13;
std::string_view ResourceKindName(ResourceKind kind);  // "gpu_mem", "nvlink_out", ...

// Where a running simulation is, for a display on another thread (`ferry simulate`'s progress
// lines): Simulate() sets ops_total at its start and publishes the rest every few thousand events
// and once at its end (relaxed stores; readers may see a slightly stale but consistent-enough view).
struct SimProgress {
  std::atomic<int64_t> ops_total{0};
  std::atomic<int64_t> ops_done{0};           // ops complete
  std::atomic<double> simulated_seconds{0};   // the simulated clock
};

struct SimOptions {
  // Not owned; when set it must outlive the Simulate() call, which updates it (SimProgress).
  SimProgress* progress = nullptr;
  bool record_op_times = false;  // fill SimResult::op_times (needed for a Chrome trace)
  bool record_ingress = false;   // fill SimResult::ingress (needed for the SVG)
  int ingress_buckets = 256;     // time buckets of the ingress series
  int propagation_rounds = 2;    // how far a rate change spreads beyond the touched links
  // A propagation round is skipped when it would recompute more flow classes than this (dense
  // all-to-all traffic, where every link sees an event soon anyway).
  int propagation_budget = 512;
  // Rates are recomputed once for all flow starts and finishes within this many seconds of the
  // first one not yet accounted for (a batch), at the batch's last event, instead of once per
  // event; meanwhile flows keep their previous rates (a new class: none). 0 batches only the
  // events of one instant. The default, 1 us, is below every per-message overhead of the presets
  // and moves the DeepSeek-V3 prediction by < 0.1% while cutting recomputations ~10x.
  double rate_batch_window = 1e-6;
  // Fraction of a link's capacity that may stay idle between recomputations. When > 0, a batch
  // recomputes only the links it cannot absorb: those of a class that gained its first member
  // (it has no rate yet), those a newcomer of an active class would take over capacity (it starts
  // at its class's rate), and those whose idle capacity, left by finished flows, exceeds this
  // fraction while some class's rate is limited there. Every other touched link keeps its rates,
  // so a link that limits anyone runs at >= (1 - rate_slack) of its capacity after each batch
  // that touches it. 0: every touched link is recomputed (exact local progressive filling).
  // docs/simulator.md ("Rate slack", "Speed") says how far the default moves the predictions and
  // how many rate updates it saves.
  double rate_slack = 0.01;
  // Most messages a rank sends at once, as the executor's executor.max_in_flight
  // (core/runtime/executor_options.h, 256 by default; the same default here): a message whose
  // sender and receiver are both ready waits, in (round, id) order on its sender's rank, until one
  // of the rank's moving messages finishes; receives take no slot, as in the executor
  // (core/runtime/rank_run.cc, StartReadyNetwork). A send whose receiver is not ready yet holds no
  // slot here, where the executor's send of a large message stays posted until its receive is
  // (tcp above tcp.eager_bytes, UCX's rendezvous); `ferry run` at executor.max_in_flight 1
  // completes all the same (tests/tools/cli/run_integration_test.cc). Slots held by sends whose
  // partner was not ready would let simulated ranks wait for each other's slots (a deadlock); only
  // moving messages hold slots here, so no window deadlocks. 0: unlimited.
  int max_in_flight = 256;
  // Bytes of staging slots a rank holds at once, as the executor's executor.staging_budget
  // (1 GiB by default, the same default here): an op whose slots are not placed yet waits until
  // its rank can place them by the executor's policy (core/plan/staging_placement.h, replayed by
  // staging_gate.h), and a plan a rank cannot run in the budget is refused as `ferry run` refuses
  // it. 0: unlimited.
  int64_t staging_budget = int64_t{1} << 30;
  // Same-node messages go as direct reads, as the executor carries them with
  // executor.direct_intra_node on (core/runtime/direct_read.h): for each message FindDirectReads
  // picks, the receiver copies the bytes once, straight from the sender's buffers, so the
  // message's Pack (unless its sender packs it: convert_on_sender) and Unpack cost nothing.
  // `ferry simulate` sets it from the config for ferry's plan (on by default, as the executor);
  // the gather-and-broadcast baseline models NCCL's staged broadcast and keeps it off.
  bool direct_reads = false;
  // With direct_reads on GPU clusters, a direct read into the twin of a block-scaled matrix
  // quantizes the whole 128x128 blocks it holds as it reads, and the Quantize op only the rest
  // (executor.quantizing_reads, core/runtime/quantizing_read.h); `ferry simulate` sets it from the
  // config.
  bool quantizing_reads = true;
  // With direct_reads on GPU clusters, where a direct read whose Pack narrows (bf16 into fp8)
  // converts (executor.convert_on_sender, core/runtime/direct_read.h). Packed (DirectRead::packed),
  // the sender runs its Pack as a staged one, holding its slot until the read completes, and the
  // receiver reads the message's bytes; otherwise the Pack costs nothing and the receiver reads
  // the wider source elements, converting as it copies. kAuto packs exactly the messages between
  // two GPUs, as the executor does from a message's second run on; `ferry simulate` sets it from
  // the config.
  ConvertOnSender convert_on_sender = ConvertOnSender::kAuto;
};

struct OpTime {
  double ready = -1;  // deps complete (a receive: and posted; a message: partner ready too)
  double start = -1;  // data starts moving
  double end = -1;    // op complete
};

struct LinkClassUsage {
  ResourceKind kind = ResourceKind::kGpuMem;
  int links_used = 0;       // links of this class that carried any bytes
  int links_total = 0;
  double bytes = 0;         // bytes carried, summed over links
  double mean_utilisation = 0;  // over the used links: bytes / (capacity * total_time)
  double max_utilisation = 0;
};

struct CriticalStep {
  int op = -1;
  double start = 0;
  double end = 0;
  std::string description;  // "send r3->r17 64.0 MiB (network), bottleneck nic_rx[node 2 nic 5]"
};

// Bytes received over the network by each node, per time bucket of width bucket_seconds.
struct IngressSeries {
  double bucket_seconds = 0;
  std::vector<std::vector<double>> bytes;  // [node][bucket]
};

struct SimResult {
  double total_time = 0;  // seconds until the last op completes
  int64_t num_ops = 0;
  int64_t num_messages = 0;
  int64_t num_events = 0;
  // Most flow classes sharing one link at once: what one rate recomputation on that link walks.
  int peak_link_classes = 0;
  // Rate recomputations (batches of flow starts and finishes) and the flow classes they
  // recomputed, summed over every propagation round: the simulator's work grows with the second.
  int64_t num_recomputations = 0;
  int64_t num_class_updates = 0;
  int64_t staging_waits = 0;  // ops that found their rank's staging full when they became ready
  double network_bytes = 0;
  double nvlink_bytes = 0;
  double local_bytes = 0;  // copies, pack/unpack and same-GPU messages
  std::vector<LinkClassUsage> utilisation;    // one per resource kind with links_total > 0
  std::vector<CriticalStep> critical_path;    // first op first
  std::vector<OpTime> op_times;               // per op id, when record_op_times
  IngressSeries ingress;                      // when record_ingress
  ClusterSpec cluster;                        // the cluster as fitted to the plan
  RankMapping mapping;
};

// Runs the simulation. Fails with a clear error on a malformed plan: an unmatched or doubly matched
// message, mismatched peers or sizes, a dep on another rank or out of range, a rank without a GPU,
// or a dependency cycle (ops that never become ready).
Result<SimResult> Simulate(const TransferPlan& plan, const ClusterSpec& cluster,
                           const RankMapping& mapping, const SimOptions& options = {});

}  // namespace ferry::sim
