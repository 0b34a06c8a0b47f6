// LaunchLocalRanks refuses rank counts a single machine cannot host, before forking anything.
#include "tools/cli/local_launch.h"

#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace ferry::cli
