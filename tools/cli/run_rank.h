// One rank of `ferry run`: plan through the library facade (RefitPlan), join the session, bind the
// plans (Refit), allocate and fill host buffers, run each variant (warm-up + measured refits),
// verify, and on rank 0 print progress and the report. Blocks; meant for the process's main thread.
#pragma once

#include "core/base/status.h"
#include "tools/cli/cmd_run.h"

namespace ferry::cli {

// The work of one rank (launcher variables must be set). Errors name the rank and the step.
Status RunRankOrError(const RunArgs& args);

}  // namespace ferry::cli
