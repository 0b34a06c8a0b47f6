// The refit pattern: replicas agree, strided fragments are filled element by element, a tensor
// stored through an element function holds it of the pattern, and a misplaced element is reported
// with its tensor and coordinates.
#include "tools/cli/refit_pattern.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/base/float_convert.h"
#include "core/base/fp8_block.h"

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

// vLLM's Mamba A: the destination stores fp32 -exp of the source's bf16 pattern, at fp32 offsets,
// and must hold exactly what the CPU reference makes of it.
TEST(RefitPatternTest, ATensorStoredThroughAnElementFunctionHoldsItOfThePattern) {
  Layout source;
  const int s = *source.AddTensor({"mixer.A_log", {6}, DType::kBF16});
  source.AppendFragment(s, Box::FromShape({6}), 0, "A_log");
  Layout destination;
  const int d = *destination.AddTensor({"mixer.A_log", {6}, DType::kBF16});
  Box tail = Box::FromShape({6});
  tail.lo[0] = 2;
  destination.PlaceFragment(d, tail, 0, "A", 8, {1});  // heads 2..5 after two fp32 of padding
  destination.buffers.SetBytes(0, 6 * 4);
  destination.transforms.push_back({d, "A = -exp(A_log)", DType::kFP32});

  std::vector<char> src(static_cast<size_t>(source.buffers[0].bytes));
  std::vector<char> dst(static_cast<size_t>(destination.buffers[0].bytes));
  ASSERT_TRUE(FillPattern(source, RankBuffers{0, {src.data()}}).ok());
  for (int head = 2; head < 6; ++head) {
    uint16_t a_log;
    std::memcpy(&a_log, &src[static_cast<size_t>(head) * 2], 2);
    const float a = -std::exp(BF16ToFloat(a_log));
    std::memcpy(&dst[static_cast<size_t>(head) * 4], &a, 4);
  }
  Result<int64_t> checked = VerifyPattern(destination, RankBuffers{0, {dst.data()}}, &source);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(*checked, 4 * 4);
  const std::vector<StoredForm> forms = StoredForms(destination);
  EXPECT_EQ(forms[0].dtype, DType::kFP32);
  EXPECT_EQ(forms[0].fn, ElementFn::kNegExp);

  std::memcpy(&dst[12], &src[6], 2);  // head 3 holding A_log's bytes, as a plain copy would
  Result<int64_t> bad = VerifyPattern(destination, RankBuffers{0, {dst.data()}}, &source);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor 'mixer.A_log' element [3]"), std::string::npos)
      << bad.status().message();
}

// A block-scaled destination: the source gets finite values, and the fp8 values and scales must
// be the reference quantization of them; a wrong scale or value is named by block or element.
TEST(RefitPatternTest, BlockScaledBuffersAreCheckedValuesAndScales) {
  Layout source;
  const int w = *source.AddTensor({"layers.0.w_proj.weight", {130, 129}, DType::kBF16});
  source.AppendFragment(w, Box::FromShape({130, 129}), 0, "w");
  Layout destination;
  const int dw = *destination.AddTensor({"layers.0.w_proj.weight", {130, 129}, DType::kFP8E4M3});
  destination.AppendFragment(dw, Box::FromShape({130, 129}), 0, "w");
  const int scales = destination.GetOrAddBuffer(0, "w_scale_inv");
  destination.buffers.SetBytes(static_cast<size_t>(scales), 2 * 2 * 4);
  destination.block_scaled.push_back({0, scales, 1, 130, 129});

  std::vector<char> src(static_cast<size_t>(source.buffers[0].bytes));
  ASSERT_TRUE(FillPattern(source, RankBuffers{0, {src.data()}}, &destination).ok());
  for (size_t i = 0; i < src.size(); i += 2) {  // bf16 exponents 0b0111xxxx: finite, normal, < 2
    const int exponent = (static_cast<unsigned char>(src[i + 1]) & 0x7f) >> 3;
    ASSERT_EQ(exponent, 7) << i;
  }
  std::vector<char> dst(130 * 129);
  std::vector<float> scale(4);
  Fp8BlockQuantizeMatrices(DType::kBF16, reinterpret_cast<const unsigned char*>(src.data()), 1, 130, 129,
                           reinterpret_cast<unsigned char*>(dst.data()), scale.data());
  const RankBuffers buffers{0, {dst.data(), reinterpret_cast<char*>(scale.data())}};
  Result<int64_t> checked = VerifyPattern(destination, buffers, &source);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(*checked, 130 * 129 + 16);

  scale[3] *= 2.0f;
  Result<int64_t> bad_scale = VerifyPattern(destination, buffers, &source);
  ASSERT_FALSE(bad_scale.ok());
  EXPECT_NE(bad_scale.status().message().find("buffer 'w' scale_inv block 3"), std::string::npos)
      << bad_scale.status().message();
  scale[3] /= 2.0f;
  dst[129 * 129 + 128] ^= 1;
  Result<int64_t> bad_value = VerifyPattern(destination, buffers, &source);
  ASSERT_FALSE(bad_value.ok());
  EXPECT_NE(bad_value.status().message().find("matrix 0 element [129, 128]"), std::string::npos)
      << bad_value.status().message();
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
