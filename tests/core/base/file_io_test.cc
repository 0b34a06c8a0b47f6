// ReadFileAtMost: a file within the limit is read whole; one beyond it is refused, unread, naming
// the limit; a missing file is an I/O error. And the readers built on it refuse oversized config
// and cluster files the same way.
#include "core/base/file_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/base/config.h"
#include "tools/sim/cluster.h"

namespace ferry {
namespace {

// A sparse file of `bytes` bytes (costs no disk) under the test's temporary directory.
std::string SparseFile(const std::string& name, int64_t bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_EQ(::truncate(path.c_str(), bytes), 0);
  return path;
}

TEST(FileIoTest, ReadsWithinTheLimitAndRefusesBeyondIt) {
  const std::string path = ::testing::TempDir() + "/small.txt";
  std::ofstream(path) << "twelve bytes";
  Result<std::string> text = ReadFileAtMost(path, 12, "test file", "kTestLimit");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "twelve bytes");
  Result<std::string> over = ReadFileAtMost(path, 11, "test file", "kTestLimit");
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("has 12 bytes, over the limit of 11 (kTestLimit)"),
            std::string::npos)
      << over.status().ToString();
  Result<std::string> missing = ReadFileAtMost(path + ".gone", 100, "test file", "kTestLimit");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("cannot open test file"), std::string::npos);
}

TEST(FileIoTest, OversizedConfigAndClusterFilesAreRefusedUnread) {
  Config config({{"test.option", "1", "an option"}});
  const std::string yaml = SparseFile("huge_config.yaml", kMaxConfigFileBytes + 1);
  Status refused = config.LoadYamlFile(yaml);
  EXPECT_NE(refused.message().find("kMaxConfigFileBytes"), std::string::npos) << refused.ToString();
  const std::string cluster = SparseFile("huge_cluster.yaml", sim::kMaxClusterFileBytes + 1);
  Status too_big = sim::LoadCluster(cluster).status();
  EXPECT_NE(too_big.message().find("kMaxClusterFileBytes"), std::string::npos) << too_big.ToString();
  std::remove(yaml.c_str());
  std::remove(cluster.c_str());
}

}  // namespace
}  // namespace ferry
