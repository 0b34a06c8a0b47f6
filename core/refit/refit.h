// The library facade: a refit planned once, then run on the caller's buffers as often as the
// caller asks. The CLI's plan, simulate, bench, run and demo, and the Python package, go through it,
// so that one configuration gives one plan everywhere.
//
//   RefitPlan  layouts + topology + strategy + Config (planner.* options) -> a TransferPlan and its
//              statistics. Needs no session: `ferry plan` and `ferry simulate` stop here.
//   Refit      a RefitPlan bound to a Session: this rank registers its buffers (by name or index)
//              and runs its part of the plan; each Run reports this rank's statistics.
//
// Threading: a RefitPlan is immutable once made and may be shared between threads and Refits.
// A Refit is driven by one thread at a time; Run blocks that thread until this rank's part is
// done, fails, or its deadline passes. The session's communicator may be aborted from another
// thread meanwhile, which makes Run fail promptly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/base/config.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "core/plan/plan.h"
#include "core/plan/stats.h"
#include "core/refit/complete_tensors.h"
#include "core/runtime/executor.h"
#include "core/runtime/session.h"
#include "planner/planner.h"

namespace ferry {

class RefitPlan {
 public:
  // Plans `strategy` for moving `source` to `destination` on `topology`, with the planner.*
  // options of `config` (or `options`). Errors name what is wrong with the inputs (shapes,
  // dtypes, uncovered elements, ranks outside the topology) or with an option. The plan keeps the
  // layouts (shared, read-only): registration by buffer name and verification read them.
  static Result<std::shared_ptr<const RefitPlan>> Make(std::shared_ptr<const Layout> source,
                                                       std::shared_ptr<const Layout> destination,
                                                       Topology topology, Strategy strategy,
                                                       const PlannerOptions& options);
  static Result<std::shared_ptr<const RefitPlan>> Make(std::shared_ptr<const Layout> source,
                                                       std::shared_ptr<const Layout> destination,
                                                       Topology topology, Strategy strategy,
                                                       const Config& config);
  static Result<std::shared_ptr<const RefitPlan>> Make(Layout source, Layout destination,
                                                       Topology topology, Strategy strategy,
                                                       const Config& config);

  const TransferPlan& plan() const { return planned_.plan; }
  const PlanResult& planned() const { return planned_; }  // plan, network demand, phase times
  const Layout& source() const { return *source_; }
  const Layout& destination() const { return *destination_; }
  const std::shared_ptr<const Layout>& shared_source() const { return source_; }
  const std::shared_ptr<const Layout>& shared_destination() const { return destination_; }
  const Topology& topology() const { return topology_; }
  Strategy strategy() const { return strategy_; }
  const PlannerOptions& options() const { return options_; }
  double planning_seconds() const { return planning_seconds_; }
  // Ops, messages, bytes by link class, node ingress/egress, lower bound, predicted time.
  PlanStats Stats() const;

 private:
  RefitPlan() = default;

  std::shared_ptr<const Layout> source_, destination_;
  Topology topology_;
  Strategy strategy_ = Strategy::kReshard;
  PlannerOptions options_;
  PlanResult planned_;
  double planning_seconds_ = 0;
};

// One rank's numbers for one Run.
struct RefitStats {
  double seconds = 0;  // this rank's Run, start to finish
  // Bytes this rank's part of the plan moves out of it, by LinkClass (index =
  // static_cast<int>(LinkClass)): local copies (same_rank), messages to or reads by ranks of its
  // node (same_node), messages to other nodes (network).
  std::array<int64_t, 3> bytes_by_link{};
  // Bytes of destination fragments on this rank that the run wrote: every one of them for Run,
  // only those not yet complete for RunRest (what a resumed refit had left to deliver here).
  int64_t bytes_delivered = 0;
  ExecutorStats executor;  // what the executor did: sent, received, copied, read directly, staging
};

class Refit {
 public:
  // Binds `plan` to `session`. Checks that the plan is for the session's world size and that the
  // plan's topology agrees with where the communicator found each rank (same node or not); the
  // error names the first rank that disagrees. `session` must outlive the Refit.
  static Result<std::unique_ptr<Refit>> Create(Session& session,
                                               std::shared_ptr<const RefitPlan> plan);
  // The same, run by an executor of the Refit's own on the session's communicator with
  // `executor_options` instead of the session's (every rank must pass the same; used to compare,
  // say, direct reads on and off in one session).
  static Result<std::unique_ptr<Refit>> Create(Session& session, std::shared_ptr<const RefitPlan> plan,
                                               const ExecutorOptions& executor_options);

  // This rank's memory behind a buffer of the source or destination layout, by index or by the
  // layout's buffer name. The buffer must belong to this rank and `memory` must be at least its
  // size. The caller owns the memory; it must stay valid and at the same address for every later
  // Run (re-register after moving it). Host memory (kHost) or CUDA device memory (kCuda, from
  // cudaMalloc or an allocator over it, such as torch's): CUDA memory must be on the device it
  // names and hold the buffer inside one allocation (core/refit/memory_check.h), and all of a
  // rank's CUDA buffers must be on one device. Blocking: for CUDA memory, a driver query (the
  // first initialises CUDA in this process).
  Status RegisterSource(int buffer, MemoryDesc memory);
  Status RegisterDestination(int buffer, MemoryDesc memory);
  Status RegisterSource(std::string_view name, MemoryDesc memory);
  Status RegisterDestination(std::string_view name, MemoryDesc memory);

  // Runs this rank's part of the plan; every rank of the plan calls it. With CUDA buffers it first
  // waits for all work this process queued on their device (any stream), so the caller need not
  // synchronise its writes to the sources; when it returns, the destinations are written. Fails,
  // naming the buffer, while one of this rank's buffers is unregistered. On failure the
  // communicator is aborted (so peers fail fast); recreate it (session.communicator().Recreate)
  // before the next Run. The first form's deadline is the config's deadline.refit.
  Result<RefitStats> Run();
  Result<RefitStats> Run(Deadline deadline);
  // As Run(deadline), but with CUDA buffers it waits only for the work queued on `caller_stream`
  // (a cudaStream_t of the buffers' device, e.g. torch.cuda.current_stream().cuda_stream; null:
  // the device's legacy default stream) rather than on every stream of the device: the caller
  // guarantees that no other stream writes the sources or uses the destinations meanwhile.
  Result<RefitStats> Run(Deadline deadline, void* caller_stream);
  // The deadline the first Run form uses, from now: the config's deadline.refit.
  Deadline DefaultDeadline() const { return Deadline::AfterSeconds(refit_seconds_); }

  // After a Run: the destination tensors (indices into the plan's destination layout, ascending)
  // of which this rank holds fragments and whose every fragment here that Run wrote whole. After
  // a failed Run these hold the new weights and the rest may hold old, new or partly written
  // bytes; after a successful Run, every tensor this rank holds; before any Run, none. Reads the
  // plan on its first call after a Run (core/refit/complete_tensors.h): call it after a failure,
  // not every step.
  std::vector<int> CompleteDestinationTensors() const;

  // Collective (every rank calls it), after a failed Run and the communicator's Recreate: moves
  // only what is missing. The ranks exchange their CompleteDestinationTensors through the store,
  // plan the refit again without those (rank, tensor) fragments, and run that plan on the
  // registered buffers: the sources must still hold what the failed Run read. Planning happens
  // here, once per call (a failure path, not every step). Afterwards CompleteDestinationTensors
  // counts both the tensors left out and what this run wrote; a RunRest that fails may be
  // followed by another. Refused for destinations with block-scaled (fp8_block) buffers, whose
  // values and scales are written together: run the whole refit.
  Result<RefitStats> RunRest(Deadline deadline);
  // Whether RunRest can run a refit into `destination` (not one with block-scaled buffers).
  static bool CanRunRest(const Layout& destination) { return destination.block_scaled.empty(); }

  const RefitPlan& plan() const { return *plan_; }

 private:
  Refit(Session& session, std::shared_ptr<const RefitPlan> plan);
  Status Register(Space space, int buffer, MemoryDesc memory);
  Result<int> BufferNamed(Space space, std::string_view name) const;
  Status CheckRegistered(Space space) const;
  // Run, after waiting for the caller's CUDA work on `caller_stream` (one_stream) or the device.
  Result<RefitStats> RunAfter(Deadline deadline, bool one_stream, void* caller_stream);

  Session& session_;
  std::shared_ptr<const RefitPlan> plan_;
  std::unique_ptr<Executor> own_executor_;  // set when created with executor options
  Executor* executor_;                      // own_executor_ or the session's
  RankMemory memory_;
  std::vector<int> own_sources_, own_destinations_;  // this rank's buffers (Run checks them)
  std::array<int64_t, 3> bytes_by_link_{};
  double refit_seconds_ = 0;
  // Bytes `rank`'s ops of `plan` move out of it, by link class: Copy and Convert ops (same_rank)
  // and sends by their link.
  static std::array<int64_t, 3> BytesByLink(const TransferPlan& plan, int rank);
  int64_t bytes_delivered_ = 0;  // the plan's destination bytes on this rank, what a Run writes
  // Runs `plan` (plan_, or a RunRest plan) on the registered memory, recording what completed.
  Result<RefitStats> RunPlan(const std::shared_ptr<const RefitPlan>& plan, Deadline deadline);

  std::shared_ptr<const RefitPlan> last_plan_;  // of the last Run or RunRest; null before any
  std::vector<int> last_completed_ops_;         // its plan op ids that completed on this rank
  std::vector<int> carried_complete_;           // tensors a RunRest's plan left out: complete
  uint64_t rest_epoch_ = 0;                     // the epoch of the last RunRest
  int rest_calls_ = 0;                          // RunRest calls in that epoch (store keys)
  mutable std::optional<DestinationWriters> writers_;  // of last_plan_, made when first asked
};

}  // namespace ferry
