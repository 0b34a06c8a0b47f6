// The kill harness on every host transport, a few trials: a rank SIGKILLed mid-refit (direct reads
// on) and one SIGSTOPped between refits (direct reads off, deadline.peer_dead 2 s) are detected by
// every survivor, each names the faulty rank, and none is left for the launcher; the same for
// rank 0 hosting the store (--store-host rank0), and for rank 0 when the launcher serves it. The
// bounds here tell the mechanisms apart (a death seen from its closed connection, a stop from the
// peer deadline, never a refit or store timeout) with room for a busy CI machine; the targets
// themselves (1 s for a death) are measured by the harness (tools/kill, the table in
// docs/BENCHMARKS.md), not by this test.
#include <gtest/gtest.h>

#include "tools/kill/kill_trial.h"

namespace ferry::kill {
namespace {

// A death is seen from the peer's closed connection: well before deadline.peer_dead (5 s by
// default) would declare the silent peer dead. Exits take 0.3-1.0 s with 8 ranks on 2 loaded cores.
constexpr double kDeathBound_s = 2.5;
// A stop is detected at most peer_dead - heartbeat after it (peer_monitor_test); a survivor's exit
// adds its abort and teardown.
constexpr double kTeardown_s = 2.0;

TrialSpec Spec(const std::string& transport) {
  TrialSpec spec;
  spec.ferry = "tools/cli/ferry";
  spec.transport = transport;
  spec.timeout_s = 40;
  return spec;
}

class KillHarnessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KillHarnessTest, AKilledRankIsNamedByEverySurvivorFromItsClosedConnection) {
  TrialSpec spec = Spec(GetParam());
  spec.fault = "kill";
  spec.moment = "mid";
  auto trial = RunTrial(spec);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_LT(trial->seconds, kDeathBound_s) << trial->output;
  EXPECT_TRUE(trial->named) << trial->output;
  EXPECT_TRUE(trial->on_their_own) << trial->output;
}

TEST_P(KillHarnessTest, AStoppedRankIsNamedWithinThePeerDeadline) {
  TrialSpec spec = Spec(GetParam());
  spec.fault = "stop";
  spec.moment = "between";
  spec.direct_reads = false;
  spec.peer_dead_s = 2.0;  // short for CI, long enough that a busy machine is not taken for a hung one
  auto trial = RunTrial(spec);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_LT(trial->seconds, spec.peer_dead_s + kTeardown_s) << trial->output;
  EXPECT_TRUE(trial->named) << trial->output;
  EXPECT_TRUE(trial->on_their_own) << trial->output;
}

INSTANTIATE_TEST_SUITE_P(HostTransports, KillHarnessTest,
                         ::testing::Values("tcp", "ucx", "libfabric"));

// Rank 0 hosts the store: survivors whose store requests fail when it dies still name rank 0
// (the store's error gets the peer monitor's cause), not the store connection.
TEST(KillHarnessStoreHostTest, TheStoreHostsDeathIsNamed) {
  TrialSpec spec = Spec("tcp");
  spec.rank = 0;
  spec.store_host = "rank0";
  spec.fault = "kill";
  spec.moment = "between";
  auto trial = RunTrial(spec);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_LT(trial->seconds, kDeathBound_s) << trial->output;
  EXPECT_TRUE(trial->named) << trial->output;
  EXPECT_TRUE(trial->on_their_own) << trial->output;
}

// A stopped store host: survivors inside store requests (the barrier after a refit) end as soon
// as the stop is detected, naming rank 0, instead of waiting out the request.
TEST(KillHarnessStoreHostTest, TheStoreHostsStopIsNamedWithinThePeerDeadline) {
  TrialSpec spec = Spec("tcp");
  spec.rank = 0;
  spec.store_host = "rank0";
  spec.fault = "stop";
  spec.moment = "between";
  spec.peer_dead_s = 2.0;
  auto trial = RunTrial(spec);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_LT(trial->seconds, spec.peer_dead_s + kTeardown_s) << trial->output;
  EXPECT_TRUE(trial->named) << trial->output;
  EXPECT_TRUE(trial->on_their_own) << trial->output;
}

// The launcher serves the store: rank 0's death is an ordinary rank's, named from its closed
// connection.
TEST(KillHarnessStoreHostTest, RankZerosDeathIsNamedWhenTheLauncherServesTheStore) {
  TrialSpec spec = Spec("tcp");
  spec.rank = 0;
  spec.fault = "kill";
  spec.moment = "mid";
  auto trial = RunTrial(spec);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_LT(trial->seconds, kDeathBound_s) << trial->output;
  EXPECT_TRUE(trial->named) << trial->output;
  EXPECT_TRUE(trial->on_their_own) << trial->output;
}

TEST(KillTrialTest, QuantileIsNearestRank) {
  EXPECT_EQ(Quantile({}, 0.5), 0);
  EXPECT_EQ(Quantile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Quantile({3, 1, 2}, 1.0), 3);
  EXPECT_EQ(Quantile({3, 1, 2}, 0.0), 1);
}

}  // namespace
}  // namespace ferry::kill
