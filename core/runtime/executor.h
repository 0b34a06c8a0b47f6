// Executor: runs one rank's part of a TransferPlan on a Communicator.
//
// Ops start when their deps (ops on the same rank) have completed, in (round, id) order. Sends and
// receives are posted without waiting (sends and forwards at most executor.max_in_flight at once,
// receives whenever ready, so that no receive holds a slot its rank's sends need); Copy, Pack, Unpack
// and Convert run on a pool of executor.copy_threads threads, large copies split into slices.
// Messages between ranks of one node go as direct reads when executor.direct_intra_node is on
// (core/runtime/direct_read.h): the receiver copies from the sender's source buffers once. Which
// messages qualify is worked out once per plan and cached (by address and PlanFingerprint).
// Ops whose regions lie in CUDA memory (MemoryKind::kCuda) run as one batched kernel launch per
// op on the executor's CUDA stream, completion seen through CUDA events; staging is then pinned
// host memory that the kernel packs into and unpacks from, and sends or receives of CUDA regions
// go through it (no transport has GPU-direct yet). Direct reads of CUDA buffers open the sender's
// allocations through CUDA IPC and move the whole message with one kernel.
// Staging slots live in one arena of at most executor.staging_budget bytes, allocated when the first
// op using a slot starts and freed when the last one completes; ops wait for space in plan order.
// When a run's slots do not all fit the budget at once, the budget must hold their plan-order
// layout (core/plan/staging_layout.h; else the run fails before any op starts), which is kept
// for the op first in plan order (core/plan/staging_placement.h): no run stalls for staging. The
// layout is kept for the next run while that run's ops and slots stay the same.
// Transport registrations are kept across runs of one communicator epoch (see
// ForgetRegistrations). Every wait is bounded by the Run deadline. A failure names the op, its
// peer and the transport, aborts the communicator (so peers fail fast instead of waiting out their
// deadlines) and is returned; the caller recreates the communicator before the next run.
//
// Threading: one Run at a time per Executor; Run blocks its caller. The communicator may be
// aborted from another thread during Run, which then fails promptly. A watchdog thread
// (run_watchdog.h) aborts the communicator when a transport call holds Run's thread more than
// 0.5 s past the deadline, so a hung call ends in an error too.
//
// Inside: each Run is a RankRun (core/runtime/rank_run.h, internal), which borrows the state kept
// here across runs: the copy pool (copy_pool.h), the staging arena (staging_arena.h), cached
// registrations (registration_cache.h), peer mappings (peer_memory.h) and the direct-read cache
// (direct_read_protocol.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/plan/staging_layout.h"
#include "core/runtime/communicator.h"
#include "core/runtime/direct_read_protocol.h"
#include "core/runtime/executor_options.h"
#include "core/runtime/gpu_read_tables.h"
#include "core/runtime/offer_history.h"
#include "core/runtime/peer_cuda_memory.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/registration_cache.h"
#include "core/runtime/run_trace.h"
#include "core/runtime/run_watchdog.h"
#include "core/runtime/staging_arena.h"
#include "core/runtime/transport.h"
#include "core/runtime/transport_traffic.h"

namespace ferry {
namespace cuda {
class CopyStream;
}  // namespace cuda

// The real memory behind a plan's buffers on this rank, indexed like TransferPlan::source_buffers
// and destination_buffers. Entries of buffers on other ranks are ignored (may be empty). The
// caller owns the memory; it must stay valid during Run.
struct RankMemory {
  std::vector<MemoryDesc> source;
  std::vector<MemoryDesc> destination;
};

struct ExecutorStats {
  double seconds = 0;
  int ops = 0;
  int64_t bytes_sent = 0;             // by staged Send/Forward ops (direct reads send none)
  int64_t bytes_sent_intra_node = 0;  // of bytes_sent, over links the plan marks same-node
  int64_t bytes_sent_network = 0;     // of bytes_sent, over links the plan marks network
  int64_t bytes_received = 0;
  int64_t bytes_copied = 0;        // by Copy/Pack/Unpack/Convert and direct reads
  int64_t bytes_read_direct = 0;   // received by direct reads from same-node peers (one copy)
  int64_t bytes_quantized_direct = 0;  // of those, quantized into fp8 as read (quantizing_read.h)
  int64_t offer_bytes_sent = 0;    // direct-read offers sent, full or abbreviated (offer_history.h)
  int full_offers_sent = 0;        // of those, full offers (the rest were abbreviated)
  int packed_offers_sent = 0;      // of those, of a packed message (direct_read.h, DirectRead::packed)
  int packed_reads = 0;            // direct reads this rank copied from a sender's packed slot
  int64_t bytes_read_packed = 0;   // of bytes_read_direct, copied from senders' packed slots
  int gpu_tables_built = 0;  // kernel descriptor tables uploaded (the rest reused: gpu_read_tables.h)
  int gpu_batches = 0;       // GPU work submissions, one event each: an op's kernel, or the direct
                             // reads of one progress sweep, or the Quantize ops started together
  int ops_analysed = 0;      // ops whose copy pairs this run read from the plan (the rest reused
                             // an earlier run's analysis of the same plan: op_copies.h)
  int peer_cuda_mappings = 0;  // peers' CUDA allocations and VMM spans this rank keeps mapped for
                               // direct reads after the run (peer_cuda_memory.h)
  int64_t peak_staging_bytes = 0;  // staging slots held at once
  int64_t staging_arena_bytes = 0;
  std::map<std::string, TransportTraffic> by_transport;  // per transport name and kDirectReadPath
};

class Executor {
 public:
  // `comm` must outlive the executor. The first form reads ExecutorOptions from comm.config().
  static Result<std::unique_ptr<Executor>> Create(Communicator& comm);
  static Result<std::unique_ptr<Executor>> Create(Communicator& comm, const ExecutorOptions& options);
  ~Executor();

  // Runs this rank's ops of `plan`; returns when all completed, or on the first failure, or at
  // `deadline` (kDeadlineExceeded naming the ops still pending). Any failure, one of the set-up
  // (a plan this rank cannot run, staging that does not fit) included, aborts the communicator,
  // so that peers waiting for this rank fail at once, naming it; Recreate before the next Run.
  Result<ExecutorStats> Run(const TransferPlan& plan, const RankMemory& memory, Deadline deadline);

  // The plan ids of this rank's ops that completed in the last Run, failed or not (every one of
  // them after a successful Run): an op that wrote destination memory completed only once its
  // bytes were there. Moved out: empty before the first Run and after a call.
  std::vector<int> TakeLastRunCompletedOps() { return std::move(last_completed_ops_); }

  // Releases the transport registrations kept across runs (the staging arena's always; user
  // buffers' when executor.cache_registrations is on), and with the latter the CUDA IPC exports
  // of source buffers. Call it before freeing or reallocating a buffer that was used in a Run, if
  // the same address may come back with the same size.
  void ForgetRegistrations();

 private:
  Executor(Communicator& comm, const ExecutorOptions& options);

  Communicator& comm_;
  const ExecutorOptions options_;  // copy_threads resolved to a count
  std::unique_ptr<CopyPool> pool_;
  StagingArena arena_;
  RegistrationCache registrations_;
  PeerMappings peer_mappings_;    // same-node peers' shared source buffers, mapped read-only
  std::vector<uint8_t> control_;  // direct-read offers, registered per run
  DirectReadCache direct_reads_;
  PeerCudaMappings peer_cuda_;              // same-node peers' CUDA allocations, opened via IPC
  CudaExports cuda_exports_;                // this rank's CUDA source buffers as peers see them
  std::unique_ptr<cuda::CopyStream> gpu_;   // the stream CUDA-memory ops run on, once needed
  GpuReadTables gpu_tables_;                // on gpu_ (declared after it: freed before it)
  GpuReadTables gpu_op_tables_;             // likewise
  OfferHistory offer_history_;              // direct-read offers of earlier runs
  StagingLayoutCache staging_layouts_;      // the last run's plan-order staging layout
  RunWatchdog watchdog_;                    // aborts comm_ when a run's thread hangs past its deadline
  RunTrace trace_;                          // the last run's timeline, when executor.trace_dir is set
  int64_t traced_runs_ = 0;
  std::vector<int> last_completed_ops_;

  void WriteTrace();
};

}  // namespace ferry
