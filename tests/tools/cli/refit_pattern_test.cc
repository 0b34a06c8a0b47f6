// The refit pattern: replicas agree, strided fragments are filled element by element, and a
// misplaced element is reported with its tensor and coordinates.
#include "tools/cli/refit_pattern.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ferry::cli {
namespace {

TEST(RefitPatternTest, ReplicasAgreeAndStridedFragmentsVerify) {
  Layout source;
  const int w = *source.AddTensor({"w", {4, 6}, DType::kBF16});
  source.AppendFragment(w, Box::FromShape({4, 6}), 0, "full");
  Layout destination;
  const int dw = *destination.AddTensor({"w", {4, 6}, DType::kBF16});
  Box left = Box::FromShape({4, 6});
  left.hi[1] = 2;
  Box right = Box::FromShape({4, 6});
  right.lo[1] = 2;
  // Columns 0..1 strided with row stride 8 in a wider buffer, columns 2..5 after them.
  destination.PlaceFragment(dw, left, 0, "fused", 0, {8, 1});
  destination.PlaceFragment(dw, right, 0, "fused", 64, {4, 1});

  std::vector<char> src(source.buffers[0].bytes), dst(destination.buffers[0].bytes);
  ASSERT_TRUE(FillPattern(source, RankBuffers{0, {src.data()}}).ok());
  ASSERT_TRUE(FillPattern(destination, RankBuffers{0, {dst.data()}}).ok());
  Result<int64_t> checked = VerifyPattern(destination, RankBuffers{0, {dst.data()}});
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(*checked, 4 * 6 * 2);
  // The destination's element (1, 3) must equal the source's: same tensor name, same index.
  EXPECT_EQ(std::memcmp(&dst[64 + (1 * 4 + 1) * 2], &src[(1 * 6 + 3) * 2], 2), 0);

  dst[64 + (1 * 4 + 1) * 2] ^= 1;
  Result<int64_t> bad = VerifyPattern(destination, RankBuffers{0, {dst.data()}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor 'w' element [1, 3]"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("1 of 16 elements"), std::string::npos);
}

TEST(RefitPatternTest, OtherRanksAndMissingMemory) {
  Layout layout;
  const int t = *layout.AddTensor({"t", {8}, DType::kFP32});
  layout.AppendFragment(t, Box::FromShape({8}), 1, "t");
  // Rank 0 holds nothing: no memory needed, nothing checked.
  Result<int64_t> none = VerifyPattern(layout, RankBuffers{0, {nullptr}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_FALSE(FillPattern(layout, RankBuffers{1, {nullptr}}).ok());
  EXPECT_FALSE(FillPattern(layout, RankBuffers{1, {}}).ok());
  EXPECT_NE(PatternWord(PatternSeed("a"), 0), PatternWord(PatternSeed("b"), 0));
  EXPECT_NE(PatternWord(PatternSeed("a"), 0), PatternWord(PatternSeed("a"), 1));
}

}  // namespace
}  // namespace ferry::cli
