// One rank of `ferry run`: plan through the library facade (RefitPlan), join the session, bind the
// plans (Refit), allocate and fill host buffers, run each variant (warm-up + measured refits),
// verify, and on rank 0 print progress and the report. Blocks; meant for the process's main thread.
#pragma once

#include "core/base/config.h"
#include "core/base/status.h"
#include "tools/cli/cmd_run.h"

namespace ferry::cli {

// The options every rank reads: defaults < --config < FERRY_* < --transport < --set, with
// deadline.refit no longer than --timeout unless set explicitly. The local launcher reads them too,
// to refuse a bad option before it starts a rank.
Result<Config> RankConfig(const RunArgs& args);

// The work of one rank (launcher variables must be set). Errors name the rank and the step. A
// failure after which this rank's communicator has aborted does not return: the rank reports it
// (ReportRankFailure) and its process exits with status 1 at once (ExitIfAborted).
Status RunRankOrError(const RunArgs& args);

// Writes `failure` to stderr as this rank's error: "ferry run: rank R: <status>", the line the
// launcher's user and the kill harness read.
void ReportRankFailure(const Status& failure);

}  // namespace ferry::cli
