// A rank that cannot even start a refit (its set-up fails: here the staging budget is one
// arena unit short) must abort the communicator like any other failure, so that its peers, who
// wait for its messages, fail at once naming it instead of waiting out their refit deadline.
// The failing rank is rank 0, the store host: the job must then go on — every rank recreates the
// communicator, the next refit (with a budget that fits) verifies, and a final store barrier
// among all three passes. Without that abort, rank 0's peers sat out their deadline in Run while
// rank 0 gave up waiting for them in a store barrier and exited, and they then read "store
// closed" or "connection closed by peer" from its store (issue 24). Twenty rounds, each a fresh
// job of three processes (about 0.1 s each), to catch an ordering that only sometimes goes wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/runtime/executor_options.h"
#include "core/runtime/store.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kRefitDeadline = 30;  // what a peer would wait without the abort
constexpr double kFailFast = 5;        // a peer's failure must come well before it

enum Code { kOk = 0, kRefitSucceeded = 2, kTooSlow = 3, kUnnamed = 4, kNotVerified = 6, kNoBarrier = 7 };

// One rank of one round: the refused refit, then recovery.
int RefusedThenRecovered(const TransferPlan& plan, const std::string& budget, int rank, int port) {
  auto joined = Join(rank, 3, port, {"executor.staging_budget=" + budget});
  if (!joined.ok()) return Report(joined.status());
  Rank& r = **joined;
  AllocateHost(r, plan, rank);
  const auto start = Clock::now();
  auto refused = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(kRefitDeadline));
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  if (refused.ok()) return kRefitSucceeded;
  const std::string why = refused.status().ToString();
  if (took > kFailFast) {
    std::fprintf(stderr, "rank %d failed only after %.2f s: %s\n", rank, took, why.c_str());
    return kTooSlow;
  }
  const std::string named = rank == 0 ? "executor.staging_budget" : "rank 0 aborted";
  if (why.find(named) == std::string::npos) {
    std::fprintf(stderr, "rank %d: the error does not say '%s': %s\n", rank, named.c_str(), why.c_str());
    return kUnnamed;
  }
  // Nobody recreates (which would abort too) before every rank has seen the refit fail.
  if (Status seen = Barrier(*r.rendezvous.store, "refused", 3, Deadline::AfterSeconds(10)); !seen.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, seen.ToString().c_str());
    return kNoBarrier;
  }
  if (Status recreated = r.comm->Recreate(Deadline::AfterSeconds(20)); !recreated.ok()) return Report(recreated);
  auto options = ExecutorOptions::FromConfig(r.config);
  if (!options.ok()) return Report(options.status());
  options->staging_budget = ExecutorOptions{}.staging_budget;  // the default: the plan fits
  auto roomy = Executor::Create(*r.comm, *options);
  if (!roomy.ok()) return Report(roomy.status());
  auto second = (*roomy)->Run(plan, r.memory, Deadline::AfterSeconds(kRefitDeadline));
  if (!second.ok()) return Report(second.status());
  if (!VerifyThreeRankPlan(r, rank)) return kNotVerified;
  Status left = FinalBarrier(*r.rendezvous.store, "recovered", rank, 3, 0, Deadline::AfterSeconds(20));
  if (!left.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, left.ToString().c_str());
  return left.ok() ? kOk : kNoBarrier;
}

TEST(SetupFailureTest, TheStoreHostsRefusedRefitFailsEveryRankAtOnceAndTheJobRecovers) {
  TransferPlan plan = ThreeRankPlan();
  ASSERT_EQ(plan.slots[0].rank, 0);
  plan.slots[0].bytes += 1;  // the arena grants whole units: this budget is one unit short
  const std::string budget = std::to_string(plan.slots[0].bytes);
  for (int round = 0; round < 20; ++round) {
    auto codes = RunRanks(3, 50, [&](int rank, int port) { return RefusedThenRecovered(plan, budget, rank, port); });
    ASSERT_EQ(codes, (std::vector<int>{kOk, kOk, kOk})) << "round " << round;
  }
}

}  // namespace
}  // namespace ferry
