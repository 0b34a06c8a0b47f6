// LaunchLocalRanks refuses rank counts a single machine cannot host, before forking anything; with
// replace_failed it starts a failed rank again once, as a replacement (FERRY_REPLACEMENT=1), but
// never rank 0 and never twice. The ranks are this test binary run again with a filter that
// selects LocalLaunchChild.Rank, which acts as LAUNCH_TEST_FAIL says.
#include "tools/cli/local_launch.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ferry::cli {
namespace {

int Threads() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

TEST(LocalLaunchTest, RefusesHundredsOfThousandsOfRanksBeforeForking) {
  LaunchOptions options;
  options.argv = {"/bin/true"};
  options.ranks = 500000;
  options.timeout_seconds = 1;
  const int threads = Threads();
  Result<LaunchResult> result = LaunchLocalRanks(options);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("kMaxLocalRanks"), std::string::npos)
      << result.status().ToString();
  EXPECT_EQ(Threads(), threads);
}

// A rank process of the tests below: LAUNCH_TEST_FAIL="<rank>" makes that rank's first process
// die of SIGKILL; "<rank>:again" makes its replacement fail too (status 3); "<rank>:late" makes it
// die only after the others (rank 0, the store host, among them) have exited. The others exit 0
// after a while, as rank 0 of a real job outlives a replacement.
TEST(LocalLaunchChild, Rank) {
  const char* fail = std::getenv("LAUNCH_TEST_FAIL");
  if (fail == nullptr) GTEST_SKIP() << "runs only as a launched rank";
  const std::string spec = fail;
  const int rank = std::atoi(std::getenv("RANK"));
  const bool replacement = std::getenv("FERRY_REPLACEMENT") != nullptr;
  if (rank != std::atoi(spec.c_str())) {
    ::usleep(1'500'000);
    ::_exit(0);
  }
  if (spec.find(":late") != std::string::npos) ::usleep(4'000'000);
  if (!replacement) ::raise(SIGKILL);
  ::_exit(spec.find(":again") != std::string::npos ? 3 : 0);
}

Result<LaunchResult> LaunchFailing(const std::string& fail) {
  LaunchOptions options;
  options.argv = {"local_launch_test", "--gtest_filter=LocalLaunchChild.Rank"};
  options.ranks = 3;
  options.timeout_seconds = 30;
  options.failure_grace_seconds = 1;
  options.replace_failed = true;
  options.environment = {{"LAUNCH_TEST_FAIL", fail}};
  return LaunchLocalRanks(options);
}

TEST(LocalLaunchTest, AFailedRankIsReplacedOnceAndTheLaunchSucceeds) {
  Result<LaunchResult> result = LaunchFailing("2");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok()) << result->Describe(30);
  ASSERT_EQ(result->replaced.size(), 1u);
  EXPECT_EQ(result->replaced[0].rank, 2);
  EXPECT_TRUE(result->replaced[0].signaled);
  EXPECT_EQ(result->replaced[0].signal, SIGKILL);
  EXPECT_EQ(result->exits[2].exit_code, 0);
  EXPECT_FALSE(result->exits[2].signaled);
}

TEST(LocalLaunchTest, RankZeroAndASecondFailureAreNotReplaced) {
  Result<LaunchResult> host = LaunchFailing("0");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_FALSE(host->ok());
  EXPECT_TRUE(host->replaced.empty());
  EXPECT_NE(host->Describe(30).find("rank 0 died of signal 9"), std::string::npos) << host->Describe(30);
  Result<LaunchResult> again = LaunchFailing("1:again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->ok());
  EXPECT_EQ(again->replaced.size(), 1u);
  EXPECT_NE(again->Describe(30).find("rank 1 exited with status 3"), std::string::npos) << again->Describe(30);
}

// A rank that dies once rank 0 has gone has no store to rejoin: a replacement would wait for
// peers that are gone until the run's deadline.
TEST(LocalLaunchTest, ARankThatDiesAfterTheStoreHostExitedIsNotReplaced) {
  Result<LaunchResult> late = LaunchFailing("2:late");
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_FALSE(late->ok());
  EXPECT_FALSE(late->timed_out);
  EXPECT_TRUE(late->replaced.empty());
  EXPECT_NE(late->Describe(30).find("rank 2 died of signal 9"), std::string::npos) << late->Describe(30);
}

}  // namespace
}  // namespace ferry::cli
