// RankRun: one Executor::Run, one rank's part of a plan from set-up to its last completion. The
// Executor keeps what outlives a run (ExecutorResources: the copy pool, the staging arena,
// cached registrations, peer mappings, the direct-read cache) and creates a RankRun per call;
// the RankRun owns everything else: dependency counts, staging slots, this run's registrations,
// the requests in flight and the statistics.
//
// Phases, each a method below:
//   set-up      CheckRunnable, AssignDirectRoles, BuildDependencies (deps and staging slots,
//               validated; each op's copies analysed once per plan, CopiesOf), ReserveStaging (the
//               arena; slots at the same offsets every run when they all fit), RegisterMemory
//               (every transport this rank posts on)
//   scheduling  StartReady starts ready ops in (round, id) order: TryStart grants staging
//               (GrantStaging), then StartCopy or StartNetwork; a direct read's ops start with
//               StartOffer / StartRead instead (direct_read_protocol.h)
//   progress    PollCopies and PollTransports hand finished work to OnCopiesDone /
//               OnRequestDone, which Complete ops and so ready their dependents
//   the end     Finish on success; AbortRun on the first failure (it aborts the communicator so
//               that peers fail fast; so does a failure of the set-up)
//   grouped transports (rank_run_grouped.cc) a rank's ops of one round on a grouped transport
//               (NCCL) are posted as one group once all are ready, rounds in order
//               (CountGroupedRounds, StartGroupedRounds); the in-flight window never splits one
//   CUDA memory (rank_run_cuda.cc) PrepareGpu picks the device and the stream; ops whose regions
//               lie in CUDA memory run as one batched kernel launch each (LaunchGpu, its
//               descriptors kept on the device from run to run by FindGpuWork; the Quantize
//               ops started together as one, QueueQuantize and FlushGpuWork:
//               core/cuda/block_quantize.h) and complete when PollGpu sees their event; a Send
//               or Recv whose data lies in CUDA memory goes through a bounce slot of the pinned
//               staging arena (StartBounced); direct reads of CUDA buffers read the peer's
//               memory through CUDA IPC, every read whose offer came in one progress sweep in
//               one kernel, their conversions in another (QueueGpuRead, FlushGpuWork): processes
//               sharing a GPU are time-sliced, so fewer, larger kernels cost fewer switches.
//               A read into the twin of a block-scaled matrix quantizes the whole blocks it
//               holds straight from the peer (QueueQuantizingRead, quantizing_read.h), and the
//               matrix's Quantize op only the rest (StartQuantizeRest); a twin none of whose
//               blocks is left to it takes no staging at all (ElideQuantizedTwins).
//
// Internal to core/runtime (a private header of the executor library). Not thread-safe: a
// RankRun lives on the thread that called Executor::Run and is used once (Execute).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/plan/staging_layout.h"
#include "core/plan/staging_placement.h"
#include "core/runtime/communicator.h"
#include "core/cuda/copy_stream.h"
#include "core/runtime/copy_pool.h"
#include "core/runtime/direct_read_protocol.h"
#include "core/runtime/executor.h"
#include "core/runtime/gpu_read_tables.h"
#include "core/runtime/op_copies.h"
#include "core/runtime/peer_cuda_memory.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/quantizing_read.h"
#include "core/runtime/registration_cache.h"
#include "core/runtime/run_trace.h"
#include "core/runtime/staging_arena.h"
#include "core/runtime/staging_memory.h"
#include "core/runtime/transport.h"

namespace ferry {

// What a RankRun borrows from its Executor: state kept across runs. Every reference outlives the
// run.
struct ExecutorResources {
  Communicator& comm;
  const ExecutorOptions& options;  // copy_threads already resolved
  CopyPool& pool;
  StagingArena& arena;
  RegistrationCache& registrations;  // the arena's and, when cached, user buffers'
  PeerMappings& peer_mappings;       // same-node peers' shared source buffers, mapped read-only
  std::vector<uint8_t>& control;     // direct-read offers, registered per run
  DirectReadCache& direct_reads;     // each plan's direct reads, and its generation (plan identity)
  PeerCudaMappings& peer_cuda;       // same-node peers' CUDA allocations, opened through IPC
  CudaExports& cuda_exports;         // this rank's CUDA source buffers as offered to peers
  std::unique_ptr<cuda::CopyStream>& gpu;  // created by the first run that touches CUDA memory
  GpuReadTables& gpu_tables;               // direct reads' device work, uploaded on `gpu`
  GpuReadTables& gpu_op_tables;            // Copy/Pack/Unpack ops' device work, likewise
  StagingLayoutCache& staging_layouts;      // the last plan-order staging layout
  OfferHistory& offer_history;              // direct-read offers of earlier runs
  RunTrace* trace;                          // this run's timeline, or null (executor.trace_dir)
};

class RankRun {
 public:
  // `plan`, `memory` and `resources` must outlive the run.
  RankRun(const ExecutorResources& resources, const TransferPlan& plan, const RankMemory& memory,
          Deadline deadline);
  RankRun(const RankRun&) = delete;
  RankRun& operator=(const RankRun&) = delete;

  // Runs this rank's ops; see Executor::Run for the contract. Call once.
  Result<ExecutorStats> Execute();
  // The plan ids of the ops that completed, in completion order (after Execute, failed or not).
  std::vector<int> TakeCompletedOps() { return std::move(completed_ids_); }

 private:
  // The set-up phase, in order; a failure leaves nothing registered for this run. Execute aborts
  // the communicator on it, as on any later failure.
  Status SetUp();
  // Ready ops are kept ordered by (round, local index).
  struct ReadyOrder {
    const TransferPlan* plan;
    const std::vector<int>* ids;
    bool operator()(int a, int b) const {
      const Op& x = plan->ops[(*ids)[a]];
      const Op& y = plan->ops[(*ids)[b]];
      return x.round != y.round ? x.round < y.round : a < b;
    }
  };
  // A registration made for this run only, released at its end.
  struct RunRegistration {
    Transport* transport;
    MemoryHandle handle;
  };

  // --- set-up ---
  Status CheckRunnable() const;
  Status AssignDirectRoles();
  Result<const OpCopies*> CopiesOf(int i);
  Status BuildDependencies();
  void ElideQuantizedTwins();
  Status ReserveStaging();
  Result<bool> StagesOnDevice();
  Result<std::vector<StagingTransport>> StagedTransports(bool all);
  Status RegisterMemory();
  Status RegisterBlock(Transport* transport, const MemoryDesc& block, bool cacheable);
  // Whether the transport that carries messages to `peer` moves CUDA memory itself (no bounce).
  bool MovesCuda(int peer);
  void ReleaseRunRegistrations();

  // --- scheduling ---
  void MakeReady(int i);
  void Complete(int i);
  void TraceOp(int i);
  Status StartReady();
  // Starts the ready sends and receives in (round, id) order: every receive whose staging can be
  // granted, sends while the window has room (HoldsWindowSlot).
  Status StartReadyNetwork();
  // Whether op i's requests count against executor.max_in_flight: a send's or a forward's.
  bool HoldsWindowSlot(int i) const;
  Result<bool> TryStart(int i);
  bool GrantStaging(int i);
  bool FirstUnstarted(int i);
  Status StartCopy(int i);
  Status StartQuantize(int i);
  // What Quantize op `id` (a plan op id) reads and writes, checked: its twin, its fp8 values and
  // scales (addresses in `rect`, every block of matrix 0), and its stack's shape.
  struct QuantizeTargets {
    const char* from = nullptr;
    QuantizeShape shape;
    cuda::BlockQuantizeRect rect;
    bool values_on_gpu = false, scales_on_gpu = false;  // in CUDA memory
    // `rect` narrowed to `blocks`, read from `src`, a matrix row every `pitch` bytes.
    cuda::BlockQuantizeRect RectOf(const BlockRect& blocks, const char* src, int64_t pitch) const {
      cuda::BlockQuantizeRect b = rect;
      b.src = src;
      b.src_pitch = pitch;
      b.matrix = blocks.matrix;
      b.block_row = blocks.block_row;
      b.block_rows = blocks.block_rows;
      b.block_col = blocks.block_col;
      b.block_cols = blocks.block_cols;
      return b;
    }
  };
  Result<QuantizeTargets> QuantizeTargetsOf(int id) const;
  Status StartQuantizeRest(int i, const QuantizeTargets& t, const std::vector<BlockRect>& quantized);
  Result<bool> DispatchCopies(int i, std::span<const CopyGeometry> geometries,
                              std::span<const CopyEnds> ends, int64_t bytes);
  Status StartNetwork(int i);
  Status PostData(int i, char* at, const void* block);
  void Track(int i, Transport* transport, RequestId request);

  // --- direct reads (direct_read_protocol.h) ---
  Status PostControl(int i, bool send, uint64_t tag, int64_t offset, int64_t bytes,
                     bool remember = false);
  Status StartOffer(int i, bool full = false);
  Status OnAnswer(int i);
  Status StartRead(int i);
  Status CopyRead(int i);
  Status CopyTaken(int i, const DirectRead& read, const OfferHistory::Taken& taken);
  Result<bool> CanOfferSlots();
  MemoryDesc SlotMemory(int slot) const;
  std::vector<MemoryDesc> SlotTargets(const DirectRead& d) const;
  std::vector<char> ElidedSlots(const DirectRead& d) const;
  bool Elides(const DirectRead& d) const;
  Status AskForFullOffer(int i);
  Status FinishRead(int i);
  int64_t AnswerOffset(int k) const;

  // --- grouped transports (rank_run_grouped.cc) ---
  bool Grouped(int i) const;
  int NetworkDepRound(int i) const;
  Status CheckMessageRounds() const;
  Status CountGroupedRounds();
  void ReadyGrouped(int i);
  bool AheadOfGroupedRounds(int i) const;
  bool GrantRound(const std::vector<int>& ops);
  Status StartGroupedRounds();

  // --- CUDA memory (rank_run_cuda.cc) ---
  enum class GpuNext : uint8_t { kComplete, kFinishRead, kPostSend };
  Status PrepareGpu();
  bool OnGpu(const Region& r) const;
  bool OnGpu(Space space, int buffer) const;
  void AddBounce(int i);
  Status CheckStagingFits();
  Status LaunchGpu(int i, std::span<const CopyGeometry> geometries, std::span<const CopyEnds> ends,
                   GpuNext next);
  Result<const cuda::WorkTables*> FindGpuWork(GpuReadTables& cache, int index,
                                              std::span<const CopyGeometry> geometries,
                                              std::span<const CopyEnds> ends);
  Status QueueQuantize(int i, const cuda::BlockQuantizeJob& job);
  Status QueueGpuRead(int i, int tables_key, std::span<const CopyGeometry> geometries,
                      std::span<const CopyEnds> ends);
  Result<bool> QueueQuantizingRead(int i, const DirectRead& d, std::span<const CopyEnds> ends);
  Status FlushGpuWork();
  Status StartBounced(int i);
  Status BounceIn(int i);
  void TrackGpu(int64_t ticket, std::vector<int> ops);
  void TraceGpuDone(int64_t ticket, size_t ops);
  void PollGpu();
  void OnGpuDone(int i);
  void DrainGpu();

  // --- progress ---
  void Drive();
  void PollCopies();
  void PollTransports();
  void PollTransport(Transport* transport, int& pending, Deadline poll_deadline);
  void OnCopiesDone(int i, const Status& status);
  void OnRequestDone(int i, const Completion& completion);
  Status DeadlineFailure() const;

  // --- the end ---
  Result<ExecutorStats> Finish();
  Status AbortRun();
  // A link failure seen here is often the echo of a failure elsewhere (a peer that aborted closes
  // its links): waits up to three heartbeats for the peer monitor to report the cause, and adds
  // it to failure_, so that the error names the rank at fault rather than a neighbour.
  void AwaitCause();

  const Op& OpAt(int i) const { return plan_.ops[ids_[i]]; }
  // Bytes of staging slot `slot`: a plan slot, or from plan_.slots.size() on a bounce slot.
  int64_t SlotBytes(int slot) const;
  std::string Describe(int i) const;
  // The address of region `r` in this rank's memory or in its staging slot (allocated by now).
  Result<char*> BaseOf(const Region& r) const;
  // The address of `bytes` at `offset` of a buffer (or, for kStaging, a placed slot), checked.
  Result<char*> AddressOf(Space space, int buffer, int64_t offset, int64_t bytes) const;

  const ExecutorResources& res_;
  Communicator& comm_;
  const TransferPlan& plan_;
  const RankMemory& memory_;
  const Deadline deadline_;
  const int rank_;
  const std::chrono::steady_clock::time_point started_;
  ExecutorStats stats_;

  // This rank's ops: ids_[i] is the plan op id of local index i.
  std::vector<int> ids_;
  int n_ = 0;
  std::unordered_map<int, int> local_;  // op id -> local index

  // Direct reads of this run and this rank's role in them.
  const std::vector<DirectRead>* directs_ = nullptr;  // none when executor.direct_intra_node is off
  uint64_t plan_generation_ = 0;  // DirectReadCache::generation of plan_: keys offers and tables
  DirectReadRoles roles_;
  std::vector<int> requests_left_;   // by op: control requests still pending
  std::vector<char> offer_received_;  // by op (receiver): the offer came, the copies started
  // By op: the control receive whose size carries meaning (receiver: the offer; sender: the
  // answer), the size it got, and whether the full offer went (sender) or was asked for (receiver).
  std::vector<RequestId> control_request_;
  std::vector<int64_t> control_bytes_;
  std::vector<char> full_offer_;
  std::vector<char> ask_pack_;  // by op (receiver): answer *done* with the request to pack
  OfferWriter offers_;

  // Dependencies and staging slots.
  std::vector<int> deps_left_;
  std::vector<std::vector<int>> dependents_;
  std::vector<std::vector<int>> slots_of_;
  std::map<int, int> slot_uses_;          // slot -> ops still using it
  int64_t arena_needed_ = 0;
  std::optional<StagingLayout> tight_layout_;  // when the run's slots do not all fit the budget
  StagingPlacement placement_;
  std::vector<char> op_started_;  // by op: started (or elided)
  size_t first_unstarted_ = 0;  // in placement_.order(): the first op not started
  bool staging_blocked_ = false;  // this scan, an earlier op could not get its slots

  // CUDA memory.
  bool on_gpu_ = false;                   // this rank's memory includes CUDA buffers
  bool device_staging_ = false;           // the staging arena is device memory (StagesOnDevice)
  std::vector<int> bounce_of_;            // by op: its bounce slot, or -1
  std::vector<int64_t> bounce_bytes_;     // by bounce slot - plan_.slots.size()
  std::vector<GpuNext> gpu_next_;         // by op: what follows its kernel
  std::map<int64_t, std::vector<int>> gpu_ops_;  // ticket -> ops, while their kernel runs
  std::map<int64_t, int64_t> gpu_launched_;      // ticket -> when it was enqueued (traced runs)
  std::vector<int64_t> op_began_;                // by op: when it started (traced runs)
  // Ops whose GPU work waits for FlushGpuWork (direct reads, Quantize ops), and that work: the
  // reads' device work in order, the Quantize ops' whole twins, and every block rectangle (the
  // quantizing reads' and the rests of Quantize ops).
  std::vector<int> gpu_queued_;
  std::vector<const cuda::WorkTables*> read_tables_;
  std::vector<cuda::BlockQuantizeJob> quantize_jobs_queued_;
  std::vector<cuda::BlockQuantizeRect> rects_queued_;
  // By Quantize op (plan id): the blocks direct reads quantized this run, which it skips.
  std::unordered_map<int, std::vector<BlockRect>> quantized_blocks_;
  // By plan slot: a twin whose reads quantize every block (ElideQuantizedTwins), never placed.
  std::vector<char> elided_twin_;
  // Whether `slot` (a plan slot, or a bounce slot past them) is an elided twin.
  bool ElidedTwin(int slot) const {
    return slot >= 0 && static_cast<size_t>(slot) < elided_twin_.size() && elided_twin_[static_cast<size_t>(slot)];
  }

  // Registrations.
  std::vector<RunRegistration> run_registrations_;
  std::map<std::pair<Transport*, const void*>, MemoryHandle> handle_of_;  // (transport, base)
  std::set<Transport*> used_transports_;
  std::vector<Transport*> transport_of_;  // by op: the transport a network op posts on, else null
  // Grouped transports: per round, this rank's ops on it not yet ready (rounds still to post).
  std::map<Transport*, std::map<int, int>> rounds_unready_;

  // Scheduling and progress.
  // Ready ops not started yet. Sends and forwards wait for a slot of the executor.max_in_flight
  // window; receives do not (a receive holding a slot could wait on a sender whose slots wait on
  // receives: ranks that both send and receive would stop each other at a small window). Local
  // ops apart too, so that a full window costs nothing.
  std::set<int, ReadyOrder> ready_sends_, ready_recvs_, ready_local_;
  int64_t readied_ = 0;  // ops made ready so far; a change means another scan may start more
  std::vector<std::vector<CopyItem>> items_;            // by op, while its copies run
  std::unordered_map<int, QuantizeWork> quantize_work_;  // by host Quantize op, while it runs
  std::map<std::pair<Transport*, RequestId>, int> request_op_;
  std::map<Transport*, int> pending_per_transport_;
  int in_flight_ = 0, copies_running_ = 0, completed_ = 0;  // in_flight_: requests posted, not done
  int sends_in_flight_ = 0;  // of in_flight_, the requests of sends and forwards (the window's)
  std::vector<int> completed_ids_;  // plan ids, as ops complete
  Status failure_;
  std::array<Completion, 64> completions_;
};

}  // namespace ferry
