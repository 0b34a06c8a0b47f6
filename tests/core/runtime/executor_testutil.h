// Helpers of the executor's multi-process tests: forked ranks with deadlines, the three-rank
// plan they run, and joining a communicator over the TCP store. Test-only; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/config.h"
#include "core/runtime/bootstrap.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/transport.h"

namespace ferry {

inline constexpr int kRows = 512, kCols = 1024;  // the source tensor: fp32 [512, 1024], 2 MiB

// Forks `size` ranks running body(rank, port); returns their exit codes (-SIGKILL when killed).
std::vector<int> RunRanks(int size, double deadline_seconds,
                          const std::function<int(int rank, int port)>& body);

inline float Value(int64_t row, int64_t col) { return static_cast<float>(row * 10000 + col); }

// Rank 0 holds the tensor. Rank 1 gets columns [0, 512) (packed, sent, unpacked) and, relayed by
// rank 2, a copy of rank 2's part; rank 2 gets columns [512, 1024) received straight into its
// destination buffer; rank 0 keeps rows [0, 32) by a local copy.
TransferPlan ThreeRankPlan(LinkClass link = LinkClass::kNetwork);

struct Rank {
  Config config = RuntimeConfig();
  Rendezvous rendezvous;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Executor> executor;
  std::vector<std::vector<float>> storage;
  std::vector<SharedHostMemory> shared;
  RankMemory memory;
};

// Fills `r.memory` with this rank's buffers of `plan`: plain heap memory, or (shared) each buffer
// in its own memfd block that same-node peers can map. Sources hold Value(row, col) of the
// kRows x kCols tensor, destinations -1.
void AllocateHost(Rank& r, const TransferPlan& plan, int rank, bool shared = false);

// Whether this rank's destination buffers hold what ThreeRankPlan delivers to it.
bool VerifyThreeRankPlan(const Rank& r, int rank);

// Sets this rank's destination buffers back to -1, as AllocateHost leaves them, so that the next
// refit must write them all again.
void PoisonDestinations(Rank& r);

// Waits (up to 10 s) for the communicator to abort: 0 when its reason says "rank <lost> died",
// 12 when it names something else, 11 when it never aborts.
int AwaitAbortNaming(const Communicator& comm, int lost);

// A survivor's part in a recovery test over ThreeRankPlan, its memory allocated: a verified refit
// (else 2), the "first-refit" barrier after which rank `lost` dies (else 4), the refit that fails
// on that death and the abort naming it (AwaitAbortNaming's codes), `lost_key` set in the store
// when `announce` (the replacement waits for it), Recreate to epoch 2 (else 13), and a refit with
// the replacement verified (else 3). 0 when all went so; a failed call is Reported (1).
int SurviveDeathOf(Rank& r, const TransferPlan& plan, int rank, int lost, bool announce,
                   const std::string& lost_key);

// Bootstraps rank `rank` of `size`, every rank on its own pretend node (so all links are network)
// unless `one_node`; as a replacement for a failed process of that rank when `replacement`; with
// `external_store`, rank 0 does not host the store but joins the one another process serves.
Result<std::unique_ptr<Rank>> Join(int rank, int size, int port,
                                   const std::vector<std::string>& settings = {},
                                   bool one_node = false, bool replacement = false,
                                   bool external_store = false);


int Report(const Status& status);

}  // namespace ferry
