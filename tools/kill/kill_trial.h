// One kill-harness trial: runs `ferry run` (8 ranks on this machine) with FERRY_INJECT_FAULT set
// (tools/cli/fault_injection.h) so that one rank kills or stops itself at a chosen moment, and
// measures from that moment to the exit of the last survivor (FERRY_LAUNCH_TRACE lines), and
// whether every survivor's error names the faulty rank. Also the percentiles over trials.
//
// Blocking: RunTrial waits for the run, at most spec.timeout_s, then kills its process group.
// Thread-safety: none needed (no shared state).
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::kill {

struct TrialSpec {
  std::string ferry;             // path of the ferry binary
  std::string transport = "tcp";
  bool direct_reads = true;      // executor.direct_intra_node
  int rank = 2;                  // the rank at fault (of 8)
  std::string fault = "kill";    // kill | stop
  std::string moment = "mid";    // mid | between (refits)
  double peer_dead_s = 5.0;      // deadline.peer_dead for the run
  double timeout_s = 60.0;       // the run's --timeout; the trial is killed a little later
  // `ferry run --store-host`: "launcher" (rank 0 an ordinary rank) or "rank0" (rank 0 hosts the
  // store, so that its death or stop is the store host's).
  std::string store_host = "launcher";
};

struct TrialResult {
  double seconds = 0;          // fault to the last survivor's exit
  bool named = false;          // every survivor's error names the faulty rank
  bool on_their_own = false;   // no survivor had to be killed by the launcher
  std::string output;          // the run's output, for diagnosis
};

// Runs one trial; an error when the run could not start, the fault never fired or the trace is
// incomplete (the message says which, with the output's tail).
Result<TrialResult> RunTrial(const TrialSpec& spec);

// The q-quantile (0..1, nearest rank) of `values`; 0 when empty.
double Quantile(std::vector<double> values, double q);

}  // namespace ferry::kill
