// `ferry run --inject-fault ... --recover` end to end, over each host transport: the real binary
// launches five ranks; rank 2 kills itself after (or during) a measured refit; every survivor must
// detect it and name rank 2, the launcher starts a replacement rank 2, all ranks move to epoch 2,
// and every remaining refit runs and is verified; the run then exits 0 with no process left.
// Each case has its own deadline and kills the process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

std::vector<std::string> RecoverArgs(const std::string& transport, const std::string& fault) {
  return {"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml", "--dst-layout",
          "tests/tools/cli/testdata/uneven_dst.yaml", "--transport", transport, "--verify", "--iterations", "4",
          "--inject-fault", fault, "--recover", "--timeout", "60"};
}

// A finished run in which rank 2 was replaced and refits `first`..4 were verified at epoch 2.
void ExpectRecovered(const Outcome& o, int first) {
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("launcher: rank 2 died of signal 9"), std::string::npos) << o.output;
  // The four survivors each detected the death and named rank 2.
  EXPECT_EQ(Count(o.output, ", names the culprit: "), 4) << o.output;
  EXPECT_NE(o.output.find("every survivor named rank 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("epoch 2: every rank reconnected, replacement rank 2 joined"), std::string::npos)
      << o.output;
  for (int refit = first; refit <= 4; ++refit) {
    const std::string verified = "reshard refit " + std::to_string(refit) + "/4, epoch 2 verified";
    EXPECT_NE(o.output.find(verified), std::string::npos) << verified << "\n" << o.output;
  }
  EXPECT_EQ(Count(o.output, "bit-exact"), 4) << o.output;
  EXPECT_NE(o.output.find("completed with rank 2 replaced"), std::string::npos) << o.output;
}

class RunRecoveryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RunRecoveryTest, AKilledRankIsReplacedAndTheRemainingRefitsVerify) {
  // Rank 2 dies between refits 2 and 3: refits 3 and 4 run at epoch 2.
  ExpectRecovered(RunFerry(RecoverArgs(GetParam(), "2:kill:after=2"), 90), 3);
}

INSTANTIATE_TEST_SUITE_P(HostTransports, RunRecoveryTest, ::testing::Values("tcp", "ucx", "libfabric"));

// The kill lands while refit 2 runs, or, when that refit is quicker than the killing thread,
// just after every rank finished it: the run resumes at the first refit not finished everywhere.
TEST(RunRecoveryTest, ARankKilledDuringARefitIsReplacedAndTheFirstUnfinishedRefitRunsAgain) {
  const Outcome o = RunFerry(RecoverArgs("tcp", "2:kill:mid=2"), 90);
  const std::string resuming = "resuming at reshard refit ";
  const size_t at = o.output.find(resuming);
  ASSERT_NE(at, std::string::npos) << o.output;
  const int first = std::atoi(o.output.c_str() + at + resuming.size());
  EXPECT_TRUE(first == 2 || first == 3) << o.output;
  ExpectRecovered(o, first);
}

TEST(RunRecoveryTest, FaultsThatCannotBeRecoveredAreRefusedBeforeAnyProcessStarts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0:kill:after=1", "rank 0 hosts the store"},
      {"2:stop:after=1", "inject a kill"},
      {"2:kill:after=4", "must leave a measured refit"},
      {"2:kill:after=0", "a number from 1"},
  };
  for (const auto& [fault, message] : cases) {
    Outcome o = RunFerry(RecoverArgs("tcp", fault), 30);
    EXPECT_EQ(o.exit_code, 1) << fault << ": " << o.output;
    EXPECT_NE(o.output.find(message), std::string::npos) << fault << ": " << o.output;
    EXPECT_EQ(o.output.find("local processes"), std::string::npos) << fault << ": " << o.output;
  }
}

}  // namespace
