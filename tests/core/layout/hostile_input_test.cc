// Hostile layout and topology input: sizes, offsets and strides that overflow int64, stacks of
// 10^12 members, ranks in the hundreds of thousands and oversized files are refused, quickly and
// with the limit named, before anything is sized from them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/layout/layout_io.h"
#include "core/layout/limits.h"
#include "core/layout/validate.h"

namespace ferry {
namespace {

// Parses `yaml` and validates it; the failure (from either) must name `limit`.
void ExpectRefused(const std::string& yaml, const std::string& limit) {
  auto started = std::chrono::steady_clock::now();
  Result<Layout> layout = ParseLayoutYaml(yaml);
  Status status = layout.ok() ? ValidateLayout(*layout) : layout.status();
  EXPECT_FALSE(status.ok()) << yaml;
  EXPECT_NE(status.message().find(limit), std::string::npos) << status.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2)) << yaml;
}

const char kHead[] = "format: ferry-layout\ntensors:\n";

TEST(HostileInputTest, SizesOffsetsAndStridesOverflowingInt64AreRefused) {
  ExpectRefused(std::string(kHead) +
                    "  - {name: w, shape: [4611686018427387904, 4], dtype: bf16}\nfragments:\n"
                    "  - {tensor: w, box: [[0, 4611686018427387904], [0, 4]], rank: 0}\n",
                "kMaxBytes");
  ExpectRefused(std::string(kHead) +
                    "  - {name: w, shape: [10, 6], dtype: bf16}\nfragments:\n"
                    "  - {tensor: w, box: [[0, 10], [0, 6]], rank: 0, byte_offset: 9223372036854775000}\n",
                "kMaxBytes");
  ExpectRefused(std::string(kHead) +
                    "  - {name: w, shape: [10, 6], dtype: bf16}\nfragments:\n"
                    "  - {tensor: w, box: [[0, 10], [0, 6]], rank: 0, byte_offset: 0,"
                    " strides: [4611686018427387904, 1]}\n",
                "kMaxBytes");
  ExpectRefused(std::string(kHead) +
                    "  - {name: w, shape: [10, 6], dtype: bf16}\nbuffers:\n"
                    "  - {rank: 0, name: big, bytes: 9223372036854775807}\nfragments:\n"
                    "  - {tensor: w, box: [[0, 10], [0, 6]], rank: 0, buffer: big}\n",
                "kMaxBytes");
}

TEST(HostileInputTest, StacksOfATrillionMembersAreRefusedWithoutVisitingThem) {
  ExpectRefused(std::string(kHead) +
                    "  - {name: 'e.[0:1000000000000].w', shape: [1000000000000, 2, 4], dtype: bf16}\n"
                    "fragments:\n"
                    "  - {tensor: 'e.[0:1000000000000].w', box: [[0, 1000000000000], [0, 2], [0, 4]],"
                    " rank: 0}\n",
                "kMaxStackMembers");
}

TEST(HostileInputTest, RanksInTheHundredsOfThousandsAreRefused) {
  ExpectRefused(std::string(kHead) +
                    "  - {name: w, shape: [10, 6], dtype: bf16}\nfragments:\n"
                    "  - {tensor: w, box: [[0, 10], [0, 6]], rank: 500000}\n",
                "kMaxRanks");
  Status topology = ParseTopologyYaml(
                        "format: ferry-topology\nuniform: {num_ranks: 1073741824, gpus_per_node: 8}\n")
                        .status();
  EXPECT_NE(topology.message().find("kMaxRanks"), std::string::npos) << topology.ToString();
}

TEST(HostileInputTest, PaddingOutOfBoundsIsRefused) {
  Result<Layout> layout = ParseLayoutYaml(std::string(kHead) +
                                          "  - {name: w, shape: [10, 6], dtype: bf16}\nfragments:\n"
                                          "  - {tensor: w, box: [[0, 10], [0, 6]], rank: 0}\n");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  Box outside;  // built field by field: Box::Make refuses negative bounds itself
  outside.ndim = 2;
  outside.lo[0] = -5;
  outside.hi[0] = 20;
  outside.hi[1] = 6;
  layout->padding.push_back({0, outside});
  Status status = ValidateLayout(*layout);
  EXPECT_NE(status.message().find("out of bounds"), std::string::npos) << status.ToString();
}

TEST(HostileInputTest, OversizedFilesAreRefusedUnread) {
  std::string path = ::testing::TempDir() + "/huge_layout.yaml";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  ASSERT_EQ(::truncate(path.c_str(), kMaxInputFileBytes + 1), 0);  // sparse: costs no disk
  Status status = LoadLayoutFile(path).status();
  EXPECT_NE(status.message().find("kMaxInputFileBytes"), std::string::npos) << status.ToString();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ferry
