// Local launch: starts one process per rank on this machine by fork/exec of the running binary,
// with torchrun-style rank variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), the
// rendezvous address (MASTER_ADDR/MASTER_PORT on 127.0.0.1) and a random FERRY_TOKEN, then
// supervises them:
//  - by default the launcher itself serves the rendezvous store (a TcpStoreServer on 127.0.0.1,
//    the port it picks) and the ranks join it with FERRY_STORE_EXTERNAL=1, so that rank 0 is an
//    ordinary rank (as torchrun's agent hosts the store, not a worker); with
//    `launcher_hosts_store` off, rank 0 hosts it on a free port, as under a plain launcher;
//  - every child dies with its parent (PR_SET_PDEATHSIG), so a killed launcher leaves no orphans
//    (and the store it serves dies with them);
//  - when a child fails, the others get `failure_grace_seconds` to fail on their own (their
//    communicator aborts), then are killed;
//  - at `timeout_seconds` every child still running is killed;
//  - with `replace_failed`, a rank whose process dies of a signal (killed, crashed) is instead
//    started again as its replacement (FERRY_REPLACEMENT=1: it joins the survivors' next epoch,
//    core/runtime/communicator.h), and the run goes on; any rank, as often as it dies, up to
//    `max_replacements` in all. Not a process that exits with an error status (it reported a
//    failure of the job, which a new process would meet again), never rank 0 when it hosts the
//    store (its death ends the job), and never once a rank has finished (exited 0): the job is
//    over, there is nothing to join.
// The call blocks until every child has been reaped. Not thread-safe (uses fork); call it from
// one thread. The children are started with an environment built before fork and execve, so the
// store's own threads cannot leave a lock held in a child.
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
// The most replacements one launch may be allowed (LaunchOptions::max_replacements): a rank that
// keeps failing is a fault to fix, not to retry for ever.
inline constexpr int kMaxReplacements = 64;

struct LaunchOptions {
  std::vector<std::string> argv;  // argv[0] is shown in messages; the binary is /proc/self/exe
  int ranks = 1;
  std::vector<std::pair<std::string, std::string>> environment;  // extra variables for children
  double timeout_seconds = 300;
  double failure_grace_seconds = 5;
  // Restart a rank whose process died of a signal as a replacement process; says so on stdout.
  bool replace_failed = false;
  // Replacements in all (every rank together), from 1 to kMaxReplacements; a failure beyond them
  // fails the launch, saying that the limit was reached.
  int max_replacements = 4;
  // The launcher serves the store and rank 0 is an ordinary rank; false: rank 0 hosts the store.
  bool launcher_hosts_store = true;
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
  // A failure was not replaced because max_replacements were used (the limit, else 0).
  int replacement_limit_reached = 0;
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
