// Tests for the string helpers.
#include "core/base/strings.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(StringsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(32.0 * 1024 * 1024), "32.0 MiB");
}

TEST(StringsTest, FormatSeconds) {
  EXPECT_EQ(FormatSeconds(1.5), "1.500 s");
  EXPECT_EQ(FormatSeconds(0.0125), "12.5 ms");
  EXPECT_EQ(FormatSeconds(0.0125, 2), "12.50 ms");
  EXPECT_EQ(FormatSeconds(0.00085), "850.0 us");
  EXPECT_EQ(FormatSeconds(0.00085, 1, false), "0.8 ms");
  EXPECT_EQ(FormatSeconds(0), "0.0 us");
}

// A slower time reads "slower", never "0.80x faster".
TEST(StringsTest, SpeedupSaysFasterOrSlower) {
  EXPECT_EQ(FormatSpeedup(1.0, 2.2), "2.20x faster");
  EXPECT_EQ(FormatSpeedup(1.0, 0.8), "1.25x slower");
  EXPECT_EQ(FormatSpeedup(1.0, 1.001), "as fast");
}

TEST(StringsTest, SplitKeepsEmptyParts) {
  std::vector<std::string> parts = Split("a,,b", ',');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "b");
}

TEST(StringsTest, TrimAndPrefix) {
  EXPECT_EQ(Trim("  x y \n"), "x y");
  EXPECT_TRUE(StartsWith("megatron:tp=2", "megatron:"));
  EXPECT_FALSE(StartsWith("vllm", "megatron:"));
  EXPECT_EQ(FormatInts({1, 2, 3}), "[1, 2, 3]");
}

}  // namespace
}  // namespace ferry
