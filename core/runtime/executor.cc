// Executor: creation from options, the state kept across runs, and Run, which hands each run to a
// RankRun (rank_run.h).
#include "core/runtime/executor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/cuda/copy_stream.h"
#include "core/runtime/copy_pool.h"
#include "core/runtime/rank_run.h"

namespace ferry {
namespace {

// How long after the run's deadline the watchdog aborts a run whose thread is stuck in a call.
constexpr std::chrono::milliseconds kWatchdogGrace{500};

Deadline WatchdogDeadline(Deadline run) {
  if (run.when() == Deadline::Never().when()) return run;
  return Deadline::After(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             run.when() - Deadline::Clock::now()) +
                         kWatchdogGrace);
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(Communicator& comm) {
  FERRY_ASSIGN_OR_RETURN(ExecutorOptions options, ExecutorOptions::FromConfig(comm.config()));
  return Create(comm, options);
}

Result<std::unique_ptr<Executor>> Executor::Create(Communicator& comm, const ExecutorOptions& options) {
  ExecutorOptions resolved = options;
  if (resolved.copy_threads <= 0) {
    resolved.copy_threads = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  }
  if (resolved.staging_budget <= 0) return InvalidArgument("executor.staging_budget must be positive");
  if (resolved.max_in_flight <= 0) return InvalidArgument("executor.max_in_flight must be positive");
  return std::unique_ptr<Executor>(new Executor(comm, resolved));
}

Executor::Executor(Communicator& comm, const ExecutorOptions& options)
    : comm_(comm),
      options_(options),
      pool_(std::make_unique<CopyPool>(options.copy_threads - 1)) {}  // the executor thread copies too

Executor::~Executor() { ForgetRegistrations(); }

void Executor::ForgetRegistrations() {
  registrations_.Clear(/*deregister=*/comm_.epoch() == registrations_.epoch() && !comm_.aborted());
  peer_mappings_.Clear();
  peer_cuda_.Clear();
  cuda_exports_.Clear();
  gpu_tables_.Clear();
  gpu_op_tables_.Clear();
  offer_history_.Clear();
}

Result<ExecutorStats> Executor::Run(const TransferPlan& plan, const RankMemory& memory,
                                    Deadline deadline) {
  const ExecutorResources resources{comm_,         options_,       *pool_,   arena_,
                                    registrations_, peer_mappings_, control_, direct_reads_,
                                    peer_cuda_,     cuda_exports_,  gpu_,     gpu_tables_,
                                    gpu_op_tables_, staging_layouts_, offer_history_,
                                    options_.trace_dir.empty() ? nullptr : &trace_};
  trace_.Clear();
  offer_history_.ForEpoch(comm_.epoch());
  RankRun run(resources, plan, memory, deadline);
  // A transport call hung on this thread past the deadline (plus a grace in which the run's own
  // deadline check normally fires) is ended by aborting the communicator.
  Communicator* comm = &comm_;
  watchdog_.Arm(WatchdogDeadline(deadline), [comm] {
    comm->Abort(DeadlineExceeded("rank " + std::to_string(comm->rank()) +
                                 ": refit deadline passed while a transport call held the executor"));
  });
  Result<ExecutorStats> result = run.Execute();
  watchdog_.Disarm();
  last_completed_ops_ = run.TakeCompletedOps();
  if (!options_.trace_dir.empty()) WriteTrace();
  return result;
}

// The run's timeline goes to its own file, in trace_dir (created when missing); a file that cannot
// be written is reported on stderr and does not fail the refit it describes.
void Executor::WriteTrace() {
  const std::string path =
      options_.trace_dir + "/rank" + std::to_string(comm_.rank()) + ".run" + std::to_string(++traced_runs_) + ".json";
  std::error_code made;
  std::filesystem::create_directories(options_.trace_dir, made);
  if (made) {
    std::fprintf(stderr, "ferry: WARNING: rank %d: trace directory %s cannot be created: %s\n", comm_.rank(),
                 options_.trace_dir.c_str(), made.message().c_str());
    return;
  }
  if (Status written = trace_.Write(path, comm_.rank()); !written.ok()) {
    std::fprintf(stderr, "ferry: WARNING: rank %d: %s\n", comm_.rank(), written.message().c_str());
  }
}

}  // namespace ferry
