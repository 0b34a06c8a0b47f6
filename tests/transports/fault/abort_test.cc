// Abort that returns, over real processes: three forked ranks (each on its own pretend node, so
// every link is network) run a plan over the fault transport wrapping tcp, with one fault on one
// rank. Checks that Communicator::Abort returns within deadline.abort although the transport's
// Abort never returns, that the hung transport is quarantined and reported, that the abort reaches
// every rank, that Recreate then builds epoch 2 beside the quarantined transport and the next refit
// verifies; and that an errored, dropped, delayed or hung op ends every rank's refit with an error
// naming the faulty rank, well before anyone could call it a hang. Children have deadlines and are
// killed by RunRanks when they outlive them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/store.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> FaultOver(std::vector<std::string> fault) {
  std::vector<std::string> settings = {"transport.network=fault", "fault.inner=tcp", "deadline.abort=1s"};
  settings.insert(settings.end(), fault.begin(), fault.end());
  return settings;
}

void ResetDestinations(Rank& r) {
  for (const MemoryDesc& d : r.memory.destination) {
    for (int64_t i = 0; i < d.bytes / 4; ++i) static_cast<float*>(d.base)[i] = -1.0f;
  }
}

// Every rank but 1: waits (up to 3 s) for rank 1's abort to arrive through the peer monitor.
int AwaitPropagatedAbort(Rank& r) {
  const auto start = Clock::now();
  while (!r.comm->aborted() && SecondsSince(start) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (!r.comm->aborted()) return 5;
  const std::string why = r.comm->abort_reason().ToString();
  if (why.find("rank 1 aborted") == std::string::npos) {
    std::fprintf(stderr, "rank %d: abort reason does not name rank 1: %s\n", r.comm->rank(), why.c_str());
    return 6;
  }
  return r.comm->quarantined().empty() ? 0 : 7;
}

TEST(AbortTest, AbortReturnsInTimeWhenTheTransportsAbortHangsAndEpochTwoRefits) {
  const TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 90, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, FaultOver({"fault.rank=1", "fault.op=abort", "fault.action=hang"}));
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    auto first = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (!first.ok()) return Report(first.status());
    if (!VerifyThreeRankPlan(r, rank)) return 2;
    if (!Barrier(*r.rendezvous.store, "refitted", 3, Deadline::AfterSeconds(20)).ok()) return 11;
    if (rank == 1) {
      const auto start = Clock::now();
      r.comm->Abort(Unavailable("rank 1 gives up"));
      const double took = SecondsSince(start);
      std::fprintf(stderr, "rank 1: Abort returned after %.3f s (deadline.abort 1 s)\n", took);
      if (took > 1.2) return 3;
      if (r.comm->quarantined() != std::vector<std::string>{"fault (epoch 1)"}) return 4;
    } else if (int code = AwaitPropagatedAbort(r); code != 0) {
      return code;
    }
    if (Status recreated = r.comm->Recreate(Deadline::AfterSeconds(20)); !recreated.ok()) return Report(recreated);
    if (r.comm->epoch() != 2 || r.comm->aborted()) return 8;
    ResetDestinations(r);
    auto second = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (!second.ok()) return Report(second.status());
    if (!VerifyThreeRankPlan(r, rank)) return 9;
    if (rank == 1 && r.comm->quarantined().size() != 1) return 10;
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 12;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// One rank's outcome of a faulted refit, as its exit code.
enum Outcome { kSucceeded = 0, kNamedCulprit = 20, kCulpritUnnamed = 21, kTooSlow = 22 };
// In FaultCase::expected: either kSucceeded or kNamedCulprit (a rank whose sends may or may not
// fit the socket buffers before the faulty rank stops reading).
constexpr int kEither = -1;

struct FaultCase {
  std::string name;
  std::vector<std::string> fault;  // fault.* settings
  int culprit;                     // the rank every error must name
  double refit_seconds;            // the Run deadline
  std::vector<int> expected;       // Outcome per rank
};

// Runs ThreeRankPlan once with `c`'s fault; each rank reports whether it succeeded or failed
// naming the culprit ("rank C" or "peer C"), within the refit deadline plus 3 s.
std::vector<int> RunFaulted(const FaultCase& c) {
  const TransferPlan plan = ThreeRankPlan();
  return RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, FaultOver(c.fault));
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    const auto start = Clock::now();
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(c.refit_seconds));
    const double took = SecondsSince(start);
    int outcome = kSucceeded;
    if (!stats.ok()) {
      const std::string why = stats.status().ToString();
      const std::string culprit = std::to_string(c.culprit);
      const bool named = why.find("rank " + culprit) != std::string::npos ||
                         why.find("peer " + culprit) != std::string::npos;
      std::fprintf(stderr, "%s: rank %d failed after %.2f s: %s\n", c.name.c_str(), rank, took, why.c_str());
      outcome = named ? kNamedCulprit : kCulpritUnnamed;
    } else if (!VerifyThreeRankPlan(r, rank)) {
      return 2;
    }
    if (took > c.refit_seconds + 3) outcome = kTooSlow;
    // Leave together, so that no rank's exit is what the others report.
    (void)Barrier(*r.rendezvous.store, "leave", 3, Deadline::AfterSeconds(20));
    return outcome;
  });
}

class FaultedRefitTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultedRefitTest, EndsInErrorsNamingTheFaultyRankNotAHang) {
  std::vector<int> outcomes = RunFaulted(GetParam());
  std::vector<int> expected = GetParam().expected;
  for (size_t rank = 0; rank < expected.size(); ++rank) {
    if (expected[rank] == kEither && (outcomes[rank] == kSucceeded || outcomes[rank] == kNamedCulprit)) {
      expected[rank] = outcomes[rank];
    }
  }
  EXPECT_EQ(outcomes, expected);
}

// ThreeRankPlan: rank 0 sends message 1 to rank 1 and message 2 to rank 2; rank 2 forwards
// message 2 to rank 1 as message 3.
INSTANTIATE_TEST_SUITE_P(
    Faults, FaultedRefitTest,
    ::testing::Values(
        // Rank 0's first send fails: it aborts, and the abort ends the others' waits.
        FaultCase{"ErroredSend", {"fault.rank=0", "fault.op=send", "fault.action=error"}, 0, 30,
                  {kNamedCulprit, kNamedCulprit, kNamedCulprit}},
        // Message 1 vanishes: rank 0 and rank 2 finish, rank 1 runs out its deadline waiting for
        // it and names peer 0. Rank 0's sends start in the order their packs finish on the copy
        // threads, so the drop is aimed by peer (fault.peer=1), not by the first send call.
        FaultCase{"DroppedSend", {"fault.rank=0", "fault.op=send", "fault.peer=1", "fault.action=drop"}, 0, 2,
                  {kSucceeded, kNamedCulprit, kSucceeded}},
        // Rank 0's first send is held for 30 s: ranks 1 and 2 time out naming peer 0, and their
        // abort wakes rank 0's held call.
        FaultCase{"DelayedSend",
                  {"fault.rank=0", "fault.op=send", "fault.action=delay", "fault.delay=30s"}, 0, 2,
                  {kNamedCulprit, kNamedCulprit, kNamedCulprit}},
        // Rank 2 hangs in its first poll: rank 1 times out naming peer 2, and the abort that
        // follows ends the hang.
        FaultCase{"HungPoll", {"fault.rank=2", "fault.op=poll", "fault.action=hang"}, 2, 2,
                  {kEither, kNamedCulprit, kNamedCulprit}},
        // Rank 1, the one every message goes to, hangs in its first poll: nobody else waits for
        // it, so only the executor's watchdog can end the hang, at rank 1's own deadline.
        FaultCase{"HungPollOfTheLastReceiver", {"fault.rank=1", "fault.op=poll", "fault.action=hang"}, 1, 2,
                  {kEither, kNamedCulprit, kEither}}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return info.param.name; });

}  // namespace
}  // namespace ferry
