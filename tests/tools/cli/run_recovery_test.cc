// `ferry run --inject-fault ... --recover` end to end, over each host transport: the real binary
// launches five ranks (the launcher serves the store); rank 2 kills itself after (or during) a
// measured refit; every survivor must detect it and name rank 2, the launcher starts a replacement
// rank 2, all ranks move to epoch 2, and every remaining refit runs and is verified; the run then
// exits 0 with no process left. Rank 0 is replaced like any rank, and failures repeat: rank 1
// twice, rank 0 then rank 2, each recovery one epoch on. A refit every survivor was running when
// the rank died is resumed: only what it left undelivered moves. Each case has its own deadline
// and kills the process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

std::vector<std::string> RecoverArgs(const std::string& transport, const std::string& fault, int iterations = 4) {
  return {"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml", "--dst-layout",
          "tests/tools/cli/testdata/uneven_dst.yaml", "--transport", transport, "--verify", "--iterations",
          std::to_string(iterations), "--inject-fault", fault, "--recover", "--timeout", "60"};
}

// One recovery of a run: `rank` was replaced and `epoch` reached, every survivor having named it.
void ExpectReplaced(const Outcome& o, int rank, int epoch) {
  const std::string who = "rank " + std::to_string(rank);
  EXPECT_NE(o.output.find("launcher: " + who + " died of signal 9"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("every survivor named " + who), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("epoch " + std::to_string(epoch) + ": every rank reconnected, replacement " + who + " joined"),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("completed with " + who + " replaced"), std::string::npos) << o.output;
}

// A finished run of `iterations` refits, each verified once, refits `first`.. at `epoch`.
void ExpectFinishedAt(const Outcome& o, int first, int epoch, int iterations = 4) {
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  const std::string of = "/" + std::to_string(iterations);
  for (int refit = first; refit <= iterations; ++refit) {
    const std::string verified = "reshard refit " + std::to_string(refit) + of + ", epoch " + std::to_string(epoch) + " verified";
    EXPECT_NE(o.output.find(verified), std::string::npos) << verified << "\n" << o.output;
  }
  EXPECT_EQ(Count(o.output, "bit-exact"), iterations) << o.output;
}

// A finished run in which rank 2 was replaced and refits `first`..4 were verified at epoch 2.
void ExpectRecovered(const Outcome& o, int first) {
  ExpectReplaced(o, 2, 2);
  // The four survivors each detected the death and named rank 2.
  EXPECT_EQ(Count(o.output, ", names the culprit: "), 4) << o.output;
  ExpectFinishedAt(o, first, 2);
}

// Where the run resumed after its recovery to `epoch` ("resuming at reshard refit N/..."), or -1.
int ResumedAt(const Outcome& o, int epoch) {
  const std::string line = "epoch " + std::to_string(epoch) + ": every rank reconnected";
  const std::string resuming = "resuming at reshard refit ";
  const size_t at = o.output.find(resuming, o.output.find(line));
  return at == std::string::npos ? -1 : std::atoi(o.output.c_str() + at + resuming.size());
}

class RunRecoveryTest : public ::testing::TestWithParam<std::string> {};

// What a resumed refit prints (run_rank.cc), and what resuming says.
constexpr char kResumed[] = "resumed: delivered ";
constexpr char kOnlyTheRest[] = "(only what it left undelivered)";

TEST_P(RunRecoveryTest, AKilledRankIsReplacedAndTheRemainingRefitsVerify) {
  // Rank 2 dies between refits 2 and 3: refits 3 and 4 run whole at epoch 2 (no survivor had
  // started refit 3's transfers, and its destinations were zeroed for it).
  const Outcome o = RunFerry(RecoverArgs(GetParam(), "2:kill:after=2"), 90);
  ExpectRecovered(o, 3);
  EXPECT_EQ(o.output.find(kResumed), std::string::npos) << o.output;
}

INSTANTIATE_TEST_SUITE_P(HostTransports, RunRecoveryTest, ::testing::Values("tcp", "ucx", "libfabric"));

// The kill lands while refit 2 runs, or, when that refit is quicker than the killing thread,
// just after every rank finished it: the run resumes at the first refit not finished everywhere.
// Resumed mid-way (every survivor was in refit 2's transfers), refit 2 moves at most the refit's
// bytes; then it verifies like the others.
TEST(RunRecoveryTest, ARankKilledDuringARefitIsReplacedAndTheFirstUnfinishedRefitRunsAgain) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "2:kill:mid=2"), 90);
  const int first = ResumedAt(o, 2);
  EXPECT_TRUE(first == 2 || first == 3) << o.output;
  ExpectRecovered(o, first);
  if (o.output.find(kOnlyTheRest) != std::string::npos) {
    EXPECT_EQ(first, 2) << o.output;
    EXPECT_NE(o.output.find(kResumed), std::string::npos) << o.output;
  }
}

// The launcher serves the store, so rank 0 is an ordinary rank: killed while refit 2 runs, it is
// replaced, the survivors (their store intact) name it, and the new rank 0 reports the rest.
TEST(RunRecoveryTest, RankZeroKilledDuringARefitIsReplacedAndTheRemainingRefitsVerify) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "0:kill:mid=2"), 90);
  ExpectReplaced(o, 0, 2);
  EXPECT_EQ(Count(o.output, ", names the culprit: "), 4) << o.output;
  const int first = ResumedAt(o, 2);
  EXPECT_TRUE(first == 2 || first == 3) << o.output;
  ExpectFinishedAt(o, first, 2);
  EXPECT_NE(o.output.find("rank 0 is a replacement process"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("recovered from 1 failure(s)"), std::string::npos) << o.output;
}

// Rank 0 dies once refit 2's transfers ended on it, before it verified and reported that refit;
// the other ranks fail waiting for every verdict of refit 2. Refit 2 counts as unfinished (rank 0
// never reported it), so it is resumed at epoch 2 and rank 0's replacement reports it: every refit
// is reported verified once. (Resuming at refit 3 lost refit 2's report: the `mid=2` case above
// did so whenever its kill landed in that window, 3 of 30 runs.) Rank 0 holds no destination
// (testdata/uneven_dst.yaml: ranks 2-4) and every survivor's are complete: the resumed refit
// delivers nothing.
TEST(RunRecoveryTest, RankZeroKilledBeforeReportingAFinishedRefitIsReplacedAndThatRefitIsResumed) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "0:kill:verify=2"), 90);
  ExpectReplaced(o, 0, 2);
  EXPECT_NE(o.output.find("recovery 1: rank 0 kill before verifying reshard refit 2/4"), std::string::npos) << o.output;
  EXPECT_EQ(ResumedAt(o, 2), 2) << o.output;
  EXPECT_NE(o.output.find("resumed: delivered 0 B of its 11.8 KiB (0 of 12080 bytes)"), std::string::npos) << o.output;
  ExpectFinishedAt(o, 2, 2);
}

// Rank 2 dies once refit 2's transfers ended on it, before it gave rank 0 its verdict: rank 0's
// wait for the verdicts ends with the abort naming rank 2 (not at deadline.store, past the run's
// --timeout), and refit 2 is resumed at epoch 2. Every survivor's destinations are complete, and
// the replacement's are new, so exactly rank 2's destination bytes move, worked by hand from
// testdata/uneven_dst.yaml: w[:, 0:1] (1000 bf16, 2000 B) and b[4:10] (6 fp32, 24 B) = 2024 of
// the refit's 12080 B (w 1000 x 6 bf16 = 12000 B, b on ranks 2, 3 and 4: 24 + 40 + 16 B).
TEST(RunRecoveryTest, ARankKilledBeforeItsVerdictIsReplacedAndThatRefitIsResumedWithOnlyItsBytes) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "2:kill:verify=2"), 90);
  EXPECT_EQ(ResumedAt(o, 2), 2) << o.output;
  EXPECT_NE(o.output.find("resuming at reshard refit 2/4 (only what it left undelivered)"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("(2024 of 12080 bytes), the rest was in place"), std::string::npos) << o.output;
  EXPECT_EQ(Count(o.output, kResumed), 1) << o.output;
  ExpectRecovered(o, 2);
}

// Rank 1 dies after refit 1 and its replacement dies after refit 3 (the second fault of the
// list, which the first replacement must not skip and the second must not fire again).
TEST(RunRecoveryTest, ARankIsReplacedTwiceEachTimeAtTheNextEpoch) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "1:kill:after=1,1:kill:after=3", 5), 120);
  ExpectReplaced(o, 1, 2);
  ExpectReplaced(o, 1, 3);
  EXPECT_EQ(ResumedAt(o, 2), 2) << o.output;
  EXPECT_EQ(ResumedAt(o, 3), 4) << o.output;
  EXPECT_EQ(Count(o.output, "launcher: rank 1 died of signal 9"), 2) << o.output;
  EXPECT_EQ(Count(o.output, ", names the culprit: "), 8) << o.output;
  EXPECT_NE(o.output.find("recovered from 2 failure(s)"), std::string::npos) << o.output;
  ExpectFinishedAt(o, 4, 3, 5);
}

// Rank 0 dies during refit 2, then rank 2 after refit 3: two recoveries, reported by rank 0's
// replacement (the first recovery's line included, kept in the store).
TEST(RunRecoveryTest, RankZeroThenRankTwoAreReplaced) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "0:kill:mid=2,2:kill:after=3", 5), 120);
  ExpectReplaced(o, 0, 2);
  ExpectReplaced(o, 2, 3);
  EXPECT_NE(o.output.find("recovery 1: rank 0 kill during reshard refit 2/5"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("recovery 2: rank 2 kill after reshard refit 3/5"), std::string::npos) << o.output;
  ExpectFinishedAt(o, 4, 3, 5);
}

// A wrong byte fails verification without aborting any communicator: the ranks that report it
// exit with an error, which no replacement could mend; the run fails at once, not at --timeout.
TEST(RunRecoveryTest, AFailureThatIsNoDeathEndsTheRunWithoutReplacements) {
  ::setenv("FERRY_INJECT_FAULT", "2:corrupt:verify", 1);
  const Outcome o = RunFerry(RecoverArgs("tcp", ""), 90);
  ::unsetenv("FERRY_INJECT_FAULT");
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_EQ(o.output.find("starting its replacement"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("rank 2 failed verification"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("ranks still running after"), std::string::npos) << o.output;
}

// With rank 0 hosting the store, other ranks are still replaced, and rank 0 says once that it
// cannot be.
TEST(RunRecoveryTest, WithRankZeroHostingTheStoreRankTwoIsReplacedAndRankZeroSaysItCannotBe) {
  std::vector<std::string> args = RecoverArgs("tcp", "2:kill:after=2");
  args.insert(args.end(), {"--store-host", "rank0"});
  const Outcome o = RunFerry(args, 90);
  ExpectRecovered(o, 3);
  EXPECT_EQ(Count(o.output, "rank 0 hosts the store (FERRY_STORE_EXTERNAL is not set), so rank 0 cannot be replaced"), 1)
      << o.output;
  EXPECT_EQ(Count(RunFerry(RecoverArgs("tcp", "2:kill:after=2"), 90).output, "rank 0 cannot be replaced"), 0);
}

TEST(RunRecoveryTest, FaultsThatCannotBeRecoveredAreRefusedBeforeAnyProcessStarts) {
  std::vector<std::string> rank0_hosts = RecoverArgs("tcp", "0:kill:after=1");
  rank0_hosts.insert(rank0_hosts.end(), {"--store-host", "rank0"});
  std::vector<std::string> over_limit = RecoverArgs("tcp", "1:kill:after=1,2:kill:after=2");
  over_limit.insert(over_limit.end(), {"--max-replacements", "1"});
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {rank0_hosts, "rank 0 hosts the store"},
      {RecoverArgs("tcp", "2:stop:after=1"), "inject a kill"},
      {RecoverArgs("tcp", "2:kill:after=4"), "must leave a measured refit"},
      {RecoverArgs("tcp", "2:kill:after=0"), "a number from 1"},
      {over_limit, "over --max-replacements 1"},
  };
  for (const auto& [args, message] : cases) {
    std::string command;
    for (const std::string& a : args) command += a + " ";
    Outcome o = RunFerry(args, 30);
    EXPECT_EQ(o.exit_code, 1) << command << ": " << o.output;
    EXPECT_NE(o.output.find(message), std::string::npos) << command << ": " << o.output;
    EXPECT_EQ(o.output.find("local processes"), std::string::npos) << command << ": " << o.output;
  }
}

}  // namespace
