// Local launch: starts one process per rank on this machine by fork/exec of the running binary,
// with torchrun-style rank variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), the
// rendezvous address (MASTER_ADDR/MASTER_PORT on 127.0.0.1, a free port) and a random
// FERRY_TOKEN, then supervises them:
//  - every child dies with its parent (PR_SET_PDEATHSIG), so a killed launcher leaves no orphans;
//  - when a child fails, the others get `failure_grace_seconds` to fail on their own (their
//    communicator aborts), then are killed;
//  - at `timeout_seconds` every child still running is killed;
//  - with `replace_failed`, a rank other than 0 (the store host) whose process fails is instead
//    started again, once, as its replacement (FERRY_REPLACEMENT=1: it joins the survivors' next
//    epoch, core/runtime/communicator.h), and the run goes on; not once rank 0 has exited, when
//    there is no job left to join.
// The call blocks until every child has been reaped. Not thread-safe (uses fork); call it from
// the main thread of a process that runs no other threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace ferry::cli {

// True when the process environment says a launcher (torchrun, mpirun, srun) started it as one
// rank of several: RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK or SLURM_PROCID with SLURM_NTASKS > 1.
bool LaunchedAsRank();

// Processes one local launch may start (one per rank, all on this machine).
inline constexpr int kMaxLocalRanks = 1024;

struct LaunchOptions {
  std::vector<std::string> argv;  // argv[0] is shown in messages; the binary is /proc/self/exe
  int ranks = 1;
  std::vector<std::pair<std::string, std::string>> environment;  // extra variables for children
  double timeout_seconds = 300;
  double failure_grace_seconds = 5;
  // Restart a failed rank (not rank 0) once, as a replacement process; says so on stdout.
  bool replace_failed = false;
};

struct RankExit {
  int rank = 0;
  int exit_code = 0;   // valid when !signaled
  int signal = 0;      // the signal that ended it, when signaled
  bool signaled = false;
  bool killed_by_launcher = false;  // we killed it (timeout or another rank failed)
};

struct LaunchResult {
  std::vector<RankExit> exits;  // one per rank, by rank: its last process
  std::vector<RankExit> replaced;  // processes that failed and were replaced, in order
  bool timed_out = false;
  bool ok() const;
  // "rank 3 exited with status 1; rank 5 killed after rank 3 failed", or "" when ok.
  // Replaced processes are not failures of the run (see `replaced`).
  std::string Describe(double timeout_seconds) const;
};

// Spawns and supervises the ranks. Fails only when a process cannot be started (the others are
// killed first); a rank's own failure is reported in the result.
Result<LaunchResult> LaunchLocalRanks(const LaunchOptions& options);

// A fresh random token (hex) for FERRY_TOKEN.
std::string RandomToken();

}  // namespace ferry::cli
