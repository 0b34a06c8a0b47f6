// LaunchLocalRanks refuses rank counts a single machine cannot host, before forking anything; it
// serves the store its ranks join (FERRY_STORE_EXTERNAL=1); with replace_failed it starts a failed
// rank again as a replacement (FERRY_REPLACEMENT=1), rank 0 included, as often as it fails up to
// max_replacements, but not rank 0 when rank 0 hosts the store and not once a rank has finished.
// The ranks are this test binary run again with a filter that selects LocalLaunchChild.Rank, which
// acts as LAUNCH_TEST_FAIL says.
#include "tools/cli/local_launch.h"

#include "core/runtime/bootstrap.h"
#include "core/runtime/tcp_store.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ferry::cli {
namespace {

// LAUNCH_TEST_FAIL=store: a barrier of the three ranks in the store at MASTER_ADDR:MASTER_PORT,
// which only the launcher can be serving (FERRY_STORE_EXTERNAL=1: no rank hosts it). 0 when met.
int MeetInTheLaunchersStore() {
  Result<BootstrapInfo> info = BootstrapFromProcessEnvironment();
  if (!info.ok() || !info->store_external) return 10;
  auto store = TcpStoreClient::Connect(info->store_host, info->store_port, info->token, Deadline::AfterSeconds(10));
  if (!store.ok()) return 11;
  return Barrier(**store, "launched", info->size, Deadline::AfterSeconds(10)).ok() ? 0 : 12;
}

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
// die of SIGKILL; "<rank>:again" makes its replacements die so too; "<rank>:error" makes its
// replacement exit with status 3; "<rank>:late" makes it
// die only after the others (rank 0, the store host, among them) have exited. The others exit 0
// after a while, as rank 0 of a real job outlives a replacement. "store" makes every rank meet the
// others at a barrier in the store the launcher serves, then exit 0.
TEST(LocalLaunchChild, Rank) {
  const char* fail = std::getenv("LAUNCH_TEST_FAIL");
  if (fail == nullptr) GTEST_SKIP() << "runs only as a launched rank";
  const std::string spec = fail;
  if (spec == "store") ::_exit(MeetInTheLaunchersStore());
  const int rank = std::atoi(std::getenv("RANK"));
  const char* replacing = std::getenv("FERRY_REPLACEMENT");
  const bool replacement = replacing != nullptr && std::string(replacing) == "1";
  if (rank != std::atoi(spec.c_str())) {
    ::usleep(1'500'000);
    ::_exit(0);
  }
  if (spec.find(":late") != std::string::npos) ::usleep(4'000'000);
  if (!replacement || spec.find(":again") != std::string::npos) ::raise(SIGKILL);
  ::_exit(spec.find(":error") != std::string::npos ? 3 : 0);
}

Result<LaunchResult> LaunchFailing(const std::string& fail, bool launcher_hosts_store = true,
                                   int max_replacements = 4) {
  LaunchOptions options;
  options.launcher_hosts_store = launcher_hosts_store;
  options.max_replacements = max_replacements;
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

TEST(LocalLaunchTest, RankZeroIsReplacedWhenTheLauncherServesTheStore) {
  Result<LaunchResult> result = LaunchFailing("0");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok()) << result->Describe(30);
  ASSERT_EQ(result->replaced.size(), 1u);
  EXPECT_EQ(result->replaced[0].rank, 0);
}

TEST(LocalLaunchTest, RankZeroHostingTheStoreIsNotReplaced) {
  Result<LaunchResult> host = LaunchFailing("0", /*launcher_hosts_store=*/false);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_FALSE(host->ok());
  EXPECT_TRUE(host->replaced.empty());
  EXPECT_NE(host->Describe(30).find("rank 0 died of signal 9"), std::string::npos) << host->Describe(30);
}

// A rank whose replacements keep dying is replaced until the limit, then the launch fails,
// saying why.
TEST(LocalLaunchTest, ARankIsReplacedAgainUpToTheLimit) {
  Result<LaunchResult> again = LaunchFailing("1:again", true, /*max_replacements=*/2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->ok());
  ASSERT_EQ(again->replaced.size(), 2u);
  EXPECT_TRUE(again->replaced[1].signaled);
  EXPECT_EQ(again->replacement_limit_reached, 2);
  const std::string why = again->Describe(30);
  EXPECT_NE(why.find("rank 1 died of signal 9"), std::string::npos) << why;
  EXPECT_NE(why.find("all 2 replacements allowed were used"), std::string::npos) << why;
  LaunchOptions absurd;
  absurd.argv = {"/bin/true"};
  absurd.max_replacements = kMaxReplacements + 1;
  EXPECT_NE(LaunchLocalRanks(absurd).status().message().find("kMaxReplacements"), std::string::npos);
}

// A process that exits with an error status reported a failure of the job: it is not replaced,
// and the launch fails at once (within the others' grace), not at its deadline.
TEST(LocalLaunchTest, AProcessThatExitsWithAnErrorIsNotReplaced) {
  Result<LaunchResult> error = LaunchFailing("2:error");
  ASSERT_TRUE(error.ok()) << error.status().ToString();
  EXPECT_FALSE(error->ok());
  EXPECT_FALSE(error->timed_out);
  ASSERT_EQ(error->replaced.size(), 1u);  // its first process died of SIGKILL; the second exited 3
  EXPECT_NE(error->Describe(30).find("rank 2 exited with status 3"), std::string::npos) << error->Describe(30);
}

// Every rank reaches the store the launcher serves, with the launch's token, whatever store
// address the launcher's own environment names.
TEST(LocalLaunchTest, RanksJoinTheStoreTheLauncherServes) {
  ::setenv("FERRY_STORE_ADDR", "192.0.2.1", 1);
  ::setenv("FERRY_STORE_PORT", "1", 1);
  Result<LaunchResult> result = LaunchFailing("store");
  ::unsetenv("FERRY_STORE_ADDR");
  ::unsetenv("FERRY_STORE_PORT");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok()) << result->Describe(30);
  EXPECT_TRUE(result->replaced.empty());
}

// A rank that dies once the others have finished (exited 0) has no job left to rejoin: a
// replacement would wait for peers that are gone until the run's deadline.
TEST(LocalLaunchTest, ARankThatDiesAfterTheOthersFinishedIsNotReplaced) {
  Result<LaunchResult> late = LaunchFailing("2:late");
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_FALSE(late->ok());
  EXPECT_FALSE(late->timed_out);
  EXPECT_TRUE(late->replaced.empty());
  EXPECT_NE(late->Describe(30).find("rank 2 died of signal 9"), std::string::npos) << late->Describe(30);
}

}  // namespace
}  // namespace ferry::cli
