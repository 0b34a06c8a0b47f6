// Recovery from a dead rank, over real processes and each host transport: rank 2's process is
// SIGKILLed between refits; the survivors see their communicator abort naming rank 2, Recreate it,
// a fresh process joins as rank 2 at that next epoch (CommunicatorOptions::replacement), and the
// next refit completes and verifies on every rank, the new rank 2 included. Every process has a
// deadline; the parent kills those that outlive it.
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

constexpr char kLost[] = "test/rank-2-lost";

// Ranks 0 and 1: a refit, rank 2's death, Recreate, a refit with its replacement.
int Survivor(const TransferPlan& plan, int rank, int port, const std::vector<std::string>& settings) {
  auto joined = Join(rank, 3, port, settings);
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  AllocateHost(r, plan, rank);
  if (int code = SurviveDeathOf(r, plan, rank, 2, /*announce=*/rank == 0, kLost); code != 0) return code;
  return FinalBarrier(*r.rendezvous.store, "recovered", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
}

// The fresh process that replaces rank 2 once it is lost.
int Replacement(const TransferPlan& plan, int port, const std::vector<std::string>& settings) {
  auto store = TcpStoreClient::Connect("127.0.0.1", port, "executor-test", Deadline::AfterSeconds(20));
  if (!store.ok()) return Report(store.status());
  if (!(*store)->Get(kLost, Deadline::AfterSeconds(40)).ok()) return 20;
  auto joined = Join(2, 3, port, settings, /*one_node=*/false, /*replacement=*/true);
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  if (r.comm->epoch() != 2) return 21;
  AllocateHost(r, plan, 2);
  auto refit = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
  if (!refit.ok()) return Report(refit.status());
  if (!VerifyThreeRankPlan(r, 2)) return 22;
  return FinalBarrier(*r.rendezvous.store, "recovered", 2, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 23;
}

// The settings that make every link of the plan (all network) use one transport.
std::vector<std::string> TransportSettings(const std::string& transport) {
  std::vector<std::string> settings = {"transport.network=" + transport};
  if (transport == "libfabric") settings.push_back("libfabric.watch_host=127.0.0.1");
  return settings;
}

class RecoveryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RecoveryTest, AKilledRankIsReplacedAtTheNextEpochAndTheNextRefitVerifies) {
  const TransferPlan plan = ThreeRankPlan();
  const std::vector<std::string> settings = TransportSettings(GetParam());
  // Processes 0-2 are ranks 0-2; process 3 is rank 2's replacement.
  auto codes = RunRanks(4, 90, [&](int process, int port) {
    if (process == 3) return Replacement(plan, port, settings);
    if (process != 2) return Survivor(plan, process, port, settings);
    auto joined = Join(2, 3, port, settings);
    if (!joined.ok()) return Report(joined.status());
    AllocateHost(**joined, plan, 2);
    auto first = (*joined)->executor->Run(plan, (*joined)->memory, Deadline::AfterSeconds(30));
    if (!first.ok() || !VerifyThreeRankPlan(**joined, 2)) return 30;
    if (!(*joined)->comm->Barrier("first-refit", Deadline::AfterSeconds(20)).ok()) return 32;
    ::kill(::getpid(), SIGKILL);
    return 31;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, -SIGKILL, 0}));
}

INSTANTIATE_TEST_SUITE_P(HostTransports, RecoveryTest, ::testing::Values("tcp", "ucx", "libfabric"));

}  // namespace
}  // namespace ferry
