// A store served by a process of its own (FERRY_STORE_EXTERNAL=1, what `ferry store` and
// `ferry run`'s launcher run), over real processes on 127.0.0.1:
//  - it serves a three-rank job in which rank 0 is an ordinary rank: rank 0's process is
//    SIGKILLed after a refit, the survivors' abort names it and their store stays usable, they
//    Recreate, a fresh rank 0 joins at epoch 2, and the next refit verifies on every rank;
//  - when the store's own process dies, a rank's store wait fails at once (well within
//    deadline.peer_dead), naming the store's address rather than any rank.
// Every process has a deadline; the parent kills those that outlive it.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/runtime/tcp_store.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

constexpr char kToken[] = "executor-test";  // the token executor_testutil's Join presents
constexpr char kLost[] = "test/rank-0-lost";
constexpr char kDone[] = "test/done";

// The store's process: serves until `ranks` have said they are done (then exits 0), or kills
// itself once they are all ready when `die_when_ready`.
int StoreProcess(int port, int ranks, bool die_when_ready) {
  auto server = TcpStoreServer::Start("127.0.0.1", port, kToken);
  if (!server.ok()) return Report(server.status());
  auto client = TcpStoreClient::Connect("127.0.0.1", port, kToken, Deadline::AfterSeconds(5));
  if (!client.ok()) return Report(client.status());
  if (die_when_ready) {
    if (!(*client)->WaitAtLeast("test/ready", ranks, Deadline::AfterSeconds(40)).ok()) return 40;
    ::kill(::getpid(), SIGKILL);
  }
  return (*client)->WaitAtLeast(kDone, ranks, Deadline::AfterSeconds(80)).ok() ? 0 : 41;
}

// The end of a rank in the job: the last barrier (no rank hosts the store: -1), then done.
int Finish(Rank& r, int rank) {
  Store& store = *r.rendezvous.store;
  if (!FinalBarrier(store, "finish", rank, 3, -1, Deadline::AfterSeconds(20)).ok()) return 5;
  return store.Add(kDone, 1, Deadline::AfterSeconds(10)).ok() ? 0 : 6;
}

// Ranks 1 and 2: a refit, rank 0's death, Recreate, a refit with rank 0's replacement.
int Survivor(const TransferPlan& plan, int rank, int port) {
  auto joined = Join(rank, 3, port, {}, false, false, /*external_store=*/true);
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  AllocateHost(r, plan, rank);
  if (int code = SurviveDeathOf(r, plan, rank, 0, /*announce=*/rank == 1, kLost); code != 0) return code;
  return Finish(r, rank);
}

// Rank 0's first process: a refit, then SIGKILL.
int DoomedRankZero(const TransferPlan& plan, int port) {
  auto joined = Join(0, 3, port, {}, false, false, /*external_store=*/true);
  if (!joined.ok()) return Report(joined.status());
  if ((*joined)->rendezvous.server != nullptr) return 32;  // rank 0 must not host the store
  AllocateHost(**joined, plan, 0);
  auto first = (*joined)->executor->Run(plan, (*joined)->memory, Deadline::AfterSeconds(30));
  if (!first.ok() || !VerifyThreeRankPlan(**joined, 0)) return 30;
  if (!(*joined)->comm->Barrier("first-refit", Deadline::AfterSeconds(20)).ok()) return 33;
  ::kill(::getpid(), SIGKILL);
  return 31;
}

// The fresh process that replaces rank 0 once it is lost.
int ReplacementRankZero(const TransferPlan& plan, int port) {
  auto store = TcpStoreClient::Connect("127.0.0.1", port, kToken, Deadline::AfterSeconds(20));
  if (!store.ok()) return Report(store.status());
  if (!(*store)->Get(kLost, Deadline::AfterSeconds(40)).ok()) return 20;
  auto joined = Join(0, 3, port, {}, false, /*replacement=*/true, /*external_store=*/true);
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  if (r.comm->epoch() != 2) return 21;
  AllocateHost(r, plan, 0);
  auto refit = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
  if (!refit.ok()) return Report(refit.status());
  if (!VerifyThreeRankPlan(r, 0)) return 22;
  return Finish(r, 0);
}

TEST(ExternalStoreTest, ServesAJobWhoseRankZeroIsKilledAndReplaced) {
  const TransferPlan plan = ThreeRankPlan();
  // Process 0 serves the store; processes 1-3 are ranks 0-2; process 4 replaces rank 0.
  auto codes = RunRanks(5, 90, [&](int process, int port) {
    if (process == 0) return StoreProcess(port, 3, /*die_when_ready=*/false);
    if (process == 1) return DoomedRankZero(plan, port);
    if (process == 4) return ReplacementRankZero(plan, port);
    return Survivor(plan, process - 1, port);
  });
  EXPECT_EQ(codes, (std::vector<int>{0, -SIGKILL, 0, 0, 0}));
}

// A rank of a job whose store dies between refits: its store wait must fail at once, naming the
// store's address (no rank died).
int RankLosingTheStore(int rank, int port) {
  auto joined = Join(rank, 3, port, {}, false, false, /*external_store=*/true);
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  // The store's process dies once every rank is ready, perhaps before answering the last of them:
  // whichever request it cuts short must fail at once, naming it.
  const auto start = std::chrono::steady_clock::now();
  Status waited = r.rendezvous.store->Add("test/ready", 1, Deadline::AfterSeconds(10)).status();
  // A wait nobody ends but the store's death (a barrier could complete before it).
  if (waited.ok()) waited = r.rendezvous.store->WaitAtLeast("test/never", 1, Deadline::AfterSeconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rank %d: %.2f s: %s\n", rank, seconds, waited.ToString().c_str());
  if (waited.ok()) return 3;
  if (waited.message().find("store 127.0.0.1:" + std::to_string(port)) == std::string::npos) return 4;
  return seconds < 3.0 ? 0 : 5;  // deadline.peer_dead is 5 s; the closed connection is seen at once
}

TEST(ExternalStoreTest, TheStoresDeathFailsTheRanksStoreWaitsAtOnceNamingIt) {
  auto codes = RunRanks(4, 60, [&](int process, int port) {
    if (process == 0) return StoreProcess(port, 3, /*die_when_ready=*/true);
    return RankLosingTheStore(process - 1, port);
  });
  EXPECT_EQ(codes, (std::vector<int>{-SIGKILL, 0, 0, 0}));
}

}  // namespace
}  // namespace ferry
