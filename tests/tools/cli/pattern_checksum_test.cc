// The fragment-checksum check of the refit pattern: the checksums the layout predicts equal the
// CPU reference over filled buffers (also for a converting refit), a wrong byte is named by rank,
// buffer, tensor and fragment, and on a GPU (skipped, visibly, without one) the device check agrees.
#include "tools/cli/pattern_checksum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/float_convert.h"
#include "core/cuda/box_checksum.h"

namespace ferry::cli {
namespace {

// Tensor "w" (4 x 6 bf16) on rank 1: columns 0..1 strided in a wider buffer, columns 2..5 after.
Layout SplitColumns() {
  Layout layout;
  const int w = *layout.AddTensor({"w", {4, 6}, DType::kBF16});
  Box left = Box::FromShape({4, 6});
  left.hi[1] = 2;
  Box right = Box::FromShape({4, 6});
  right.lo[1] = 2;
  layout.PlaceFragment(w, left, 1, "fused", 0, {8, 1});
  layout.PlaceFragment(w, right, 1, "fused", 64, {4, 1});
  return layout;
}

std::vector<uint64_t> HostChecksums(const Layout& layout, const RankBuffers& buffers) {
  Result<std::vector<cuda::StridedCopy>> boxes = FragmentBoxes(layout, buffers);
  EXPECT_TRUE(boxes.ok()) << boxes.status().ToString();
  std::vector<uint64_t> sums;
  for (const cuda::StridedCopy& box : *boxes) sums.push_back(cuda::HostBoxChecksum(box));
  return sums;
}

TEST(PatternChecksumTest, LayoutPredictsTheChecksumsOfFilledBuffers) {
  const Layout layout = SplitColumns();
  std::vector<char> bytes(layout.buffers[0].bytes);
  const RankBuffers buffers{1, {bytes.data()}};
  ASSERT_TRUE(FillPattern(layout, buffers).ok());
  const std::vector<uint64_t> expected = PatternChecksums(layout, 1);
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_EQ(HostChecksums(layout, buffers), expected);
  EXPECT_TRUE(PatternChecksums(layout, 0).empty());
}

// vLLM's Mamba A: fp32 -exp of the source's bf16 pattern, its boxes read as fp32 with neg_exp.
TEST(PatternChecksumTest, DestinationsStoredThroughAnElementFunctionPredictTheirChecksums) {
  Layout source;
  const int s = *source.AddTensor({"A_log", {40}, DType::kBF16});
  source.AppendFragment(s, Box::FromShape({40}), 0, "A_log");
  Layout destination;
  const int d = *destination.AddTensor({"A_log", {40}, DType::kBF16});
  destination.PlaceFragment(d, Box::FromShape({40}), 0, "A", 0, {1});
  destination.buffers.SetBytes(0, 40 * 4);
  destination.transforms.push_back({d, "A = -exp(A_log)", DType::kFP32});
  std::vector<float> a(40), widened(40);
  for (int64_t i = 0; i < 40; ++i) {
    widened[static_cast<size_t>(i)] = BF16ToFloat(static_cast<uint16_t>(PatternWord(PatternSeed("A_log"), i)));
    a[static_cast<size_t>(i)] = -std::exp(widened[static_cast<size_t>(i)]);
  }
  const RankBuffers buffers{0, {reinterpret_cast<char*>(a.data())}};
  EXPECT_EQ(HostChecksums(destination, buffers), PatternChecksums(destination, 0, &source));
  // A_log merely widened to fp32, as a Convert without the function would leave it, differs.
  const RankBuffers plain{0, {reinterpret_cast<char*>(widened.data())}};
  EXPECT_NE(HostChecksums(destination, plain), PatternChecksums(destination, 0, &source));
  Result<std::vector<PatternBox>> boxes = FragmentPatternBoxes(destination, 0, &source);
  ASSERT_TRUE(boxes.ok());
  EXPECT_EQ((*boxes)[0].from, DType::kBF16);
  EXPECT_EQ((*boxes)[0].to, DType::kFP32);
  EXPECT_EQ((*boxes)[0].fn, ElementFn::kNegExp);
}

TEST(PatternChecksumTest, ConvertedDestinationsHoldTheConvertedPattern) {
  Layout source;
  const int s = *source.AddTensor({"a", {300}, DType::kFP32});
  source.AppendFragment(s, Box::FromShape({300}), 0, "a");
  Layout destination;
  const int d = *destination.AddTensor({"a", {300}, DType::kBF16});
  destination.AppendFragment(d, Box::FromShape({300}), 0, "a");
  std::vector<unsigned char> bytes(600);
  for (int64_t i = 0; i < 300; ++i) {
    const uint64_t word = PatternWord(PatternSeed("a"), i);
    ConvertElement(DType::kFP32, DType::kBF16, reinterpret_cast<const unsigned char*>(&word), &bytes[i * 2]);
  }
  const RankBuffers buffers{0, {reinterpret_cast<char*>(bytes.data())}};
  ASSERT_TRUE(VerifyPattern(destination, buffers, &source).ok());
  EXPECT_EQ(HostChecksums(destination, buffers), PatternChecksums(destination, 0, &source));
  EXPECT_NE(PatternChecksums(destination, 0, &source), PatternChecksums(destination, 0));
}

TEST(PatternChecksumTest, AWrongByteIsNamedByRankTensorAndFragment) {
  const Layout layout = SplitColumns();
  std::vector<char> bytes(layout.buffers[0].bytes);
  const RankBuffers buffers{1, {bytes.data()}};
  ASSERT_TRUE(FillPattern(layout, buffers).ok());
  bytes[64 + 5 * 2 + 1] ^= 0x40;  // element (1, 3): the second fragment
  const Status status =
      CompareFragmentChecksums(layout, 1, PatternChecksums(layout, 1), HostChecksums(layout, buffers));
  ASSERT_FALSE(status.ok());
  const std::string& message = status.message();
  EXPECT_NE(message.find("rank 1 buffer 'fused' tensor 'w' fragment " + layout.fragments[1].box.ToString()),
            std::string::npos) << message;
  EXPECT_NE(message.find("1 of 2 fragments of this rank differ"), std::string::npos) << message;
  EXPECT_FALSE(CompareFragmentChecksums(layout, 1, {1}, {1, 2}).ok());
}

TEST(PatternChecksumTest, BuffersMustMatchTheLayout) {
  const Layout layout = SplitColumns();
  EXPECT_FALSE(FragmentBoxes(layout, RankBuffers{1, {}}).ok());
  EXPECT_FALSE(FragmentBoxes(layout, RankBuffers{1, {nullptr}}).ok());
  EXPECT_TRUE(FragmentBoxes(layout, RankBuffers{0, {nullptr}}).ok());
}

TEST(PatternChecksumTest, PatternBoxesGiveEachElementItsGlobalIndex) {
  const Layout layout = SplitColumns();
  Result<std::vector<PatternBox>> boxes = FragmentPatternBoxes(layout, 1);
  ASSERT_TRUE(boxes.ok()) << boxes.status().ToString();
  ASSERT_EQ(boxes->size(), 2u);
  const PatternBox& right = (*boxes)[1];  // columns 2..5 of a 4 x 6 tensor
  EXPECT_EQ(right.first_index, 2);
  EXPECT_EQ(right.shape[0], 4);
  EXPECT_EQ(right.shape[1], 4);
  EXPECT_EQ(right.index_strides[0], 6);
  EXPECT_EQ(right.index_strides[1], 1);
  EXPECT_EQ(right.seed, PatternSeed("w"));
}

// A 3-dim fp32 tensor cut into uneven boxes on two ranks, and its bf16 and fp8 destinations.
struct ThreeDims {
  Layout source, destination;
  ThreeDims() {
    const int s = *source.AddTensor({"experts.w13", {5, 7, 9}, DType::kFP32});
    source.AppendFragment(s, Box::FromShape({5, 7, 9}), 0, "all");
    const int d = *destination.AddTensor({"experts.w13", {5, 7, 9}, DType::kBF16});
    const int e = *destination.AddTensor({"experts.w13_fp8", {5, 7, 9}, DType::kFP8E4M3});
    (void)source.AddTensor({"experts.w13_fp8", {5, 7, 9}, DType::kFP32});
    for (int t : {d, e}) {
      for (int64_t lo : {0, 3}) {
        Box b = Box::FromShape({5, 7, 9});
        b.lo[1] = lo;
        b.hi[1] = lo == 0 ? 3 : 7;
        b.lo[2] = 1;
        destination.AppendFragment(t, b, lo == 0 ? 0 : 1, "dst");
      }
    }
  }
};

TEST(PatternChecksumGpuTest, PatternChecksumsOnTheGpuEqualTheCpuReference) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  const ThreeDims case3;
  for (int rank : {0, 1}) {
    for (const Layout* source : {static_cast<const Layout*>(nullptr), &case3.source}) {
      Result<std::vector<PatternBox>> boxes = FragmentPatternBoxes(case3.destination, rank, source);
      ASSERT_TRUE(boxes.ok()) << boxes.status().ToString();
      Result<std::vector<uint64_t>> sums = PatternBoxChecksums(*boxes);
      ASSERT_TRUE(sums.ok()) << sums.status().ToString();
      EXPECT_EQ(*sums, PatternChecksums(case3.destination, rank, source)) << "rank " << rank;
    }
  }
  const Layout split = SplitColumns();
  Result<std::vector<PatternBox>> boxes = FragmentPatternBoxes(split, 1);
  ASSERT_TRUE(boxes.ok());
  Result<std::vector<uint64_t>> sums = PatternBoxChecksums(*boxes);
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  EXPECT_EQ(*sums, PatternChecksums(split, 1));
}

TEST(PatternChecksumGpuTest, DeviceCheckPassesAndNamesAWrongByte) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  const Layout layout = SplitColumns();
  std::vector<char> bytes(layout.buffers[0].bytes);
  ASSERT_TRUE(FillPattern(layout, RankBuffers{1, {bytes.data()}}).ok());
  Result<void*> device = cuda::DeviceAlloc(static_cast<int64_t>(bytes.size()));
  ASSERT_TRUE(device.ok());
  ASSERT_TRUE(cuda::CopyToDevice(*device, bytes.data(), static_cast<int64_t>(bytes.size())).ok());
  const RankBuffers on_device{1, {static_cast<char*>(*device)}};
  Result<int64_t> checked = VerifyPatternOnDevice(layout, on_device);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(*checked, 4 * 6 * 2);

  const char wrong = static_cast<char>(bytes[3 * 16] ^ 1);  // element (3, 0): the first fragment
  ASSERT_TRUE(cuda::CopyToDevice(static_cast<char*>(*device) + 3 * 16, &wrong, 1).ok());
  Result<int64_t> bad = VerifyPatternOnDevice(layout, on_device);
  ASSERT_FALSE(bad.ok());
  const std::string where = "rank 1 buffer 'fused' tensor 'w' fragment " + layout.fragments[0].box.ToString();
  EXPECT_NE(bad.status().message().find(where), std::string::npos) << bad.status().message();
  ASSERT_TRUE(cuda::DeviceFree(*device).ok());
}

}  // namespace
}  // namespace ferry::cli
