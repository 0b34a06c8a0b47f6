// process_ranks_testutil: runs one test scenario as N real processes (fork), each a rank with its
// own transport instance, rendezvousing through the runtime's TCP store hosted by the test process.
// Used by the ucx and libfabric transport tests.
//
// Every run has a deadline: children still alive when it passes are killed (SIGKILL) and the run
// fails, so a hung transport fails the test instead of hanging it. A child's failure text travels
// back through a pipe and becomes the run's error.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/base/config.h"
#include "core/runtime/store.h"
#include "core/runtime/transport.h"

namespace ferry::testing {

// A transport under test: the registry name plus option overrides ("ucx.tls" -> "tcp").
struct TransportUnderTest {
  std::string label;  // test-name suffix, e.g. "ucx_tcp"
  std::string name;   // registry name
  std::map<std::string, std::string> options;
  // Scenarios this configuration cannot pass because of a known library defect: scenario name
  // (the TEST_P name) -> the defect, printed as the skip reason.
  std::map<std::string, std::string> known_defects = {};
};

// What a rank's scenario gets: its transport, already connected to every rank (itself included),
// and the store (keys under "t/" are free for the scenario).
struct RankEnv {
  int rank = 0;
  int size = 0;
  Transport* transport = nullptr;
  Store* store = nullptr;
  // Set by a scenario whose peers will not reach the final "done" barrier (a peer that exits).
  bool skip_final_barrier = false;
};

using RankScenario = std::function<Status(RankEnv& env)>;

// Builds the config for `transport` (defaults of every registered transport + overrides).
Result<Config> MakeConfig(const TransportUnderTest& transport);

// Forks `size` ranks; each creates `transport` (epoch 1), exchanges endpoint info through the
// store, connects to every rank, meets the others at a barrier, runs `scenario`, and exits 0 on OK.
// Returns OK when every rank succeeded, else the first failure (naming the rank), or
// kDeadlineExceeded after killing the ranks still running at `timeout_seconds`.
Status RunRanks(int size, const TransportUnderTest& transport, const RankScenario& scenario,
                double timeout_seconds);

// Posts nothing; polls `transport` until `request` completes or `deadline` passes, collecting
// other completions into `others` (request id -> completion). Returns the completion of `request`
// or kDeadlineExceeded.
Result<Completion> WaitFor(Transport& transport, RequestId request,
                           std::map<RequestId, Completion>& others, Deadline deadline);

// Polls until every request in `requests` has completed (or the deadline passes); returns their
// completions by id.
Result<std::map<RequestId, Completion>> WaitAll(Transport& transport,
                                                const std::vector<RequestId>& requests,
                                                Deadline deadline);

// Fills / checks a deterministic pattern that depends on (seed, byte index).
void FillPattern(uint8_t* data, size_t bytes, uint64_t seed);
Status CheckPattern(const uint8_t* data, size_t bytes, uint64_t seed);

}  // namespace ferry::testing
