// Test helper: runs the real `ferry` binary (tools/cli/ferry in the test's runfiles) as a child
// in its own process group, with its stdout and stderr in one log, under a deadline; then checks
// that no process of the group (a rank) is left. Test-only; not thread-safe (fork).
#pragma once

#include <string>
#include <vector>

namespace ferry::cli::testing {

struct Outcome {
  int exit_code = -1;
  bool timed_out = false;
  bool group_left_processes = false;
  std::string output;  // stdout and stderr together
};

// Runs tools/cli/ferry with `args`; kills the whole group at `timeout_seconds`. The log goes
// under TEST_TMPDIR.
Outcome RunFerry(const std::vector<std::string>& args, double timeout_seconds);

// How often `what` occurs in `text`.
int Count(const std::string& text, const std::string& what);

}  // namespace ferry::cli::testing
