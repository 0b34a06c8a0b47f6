// Tests for Box geometry, Layout bookkeeping and Topology.
#include "core/layout/layout.h"

#include <gtest/gtest.h>

#include "core/layout/topology.h"

namespace ferry {
namespace {

TEST(BoxTest, VolumeIntersectContains) {
  Box a = *Box::Make({0, 0}, {4, 8});
  Box b = *Box::Make({2, 6}, {6, 10});
  EXPECT_EQ(a.Volume(), 32);
  Box i = a.Intersect(b);
  EXPECT_EQ(i, *Box::Make({2, 6}, {4, 8}));
  EXPECT_EQ(i.Volume(), 4);
  EXPECT_TRUE(a.Contains(i));
  EXPECT_FALSE(a.Contains(b));
  Box far = *Box::Make({5, 0}, {6, 1});
  EXPECT_TRUE(a.Intersect(far).Empty());
  EXPECT_EQ(a.ToString(), "[0:4, 0:8)");
}

TEST(BoxTest, IntersectsAgreesWithIntersect) {
  // Every pair of 1-D and 2-D boxes with corners in [0, 4), touching, overlapping, nested, empty
  // and of different ndim: Intersects says whether Intersect is non-empty.
  std::vector<Box> boxes;
  for (int lo = 0; lo < 4; ++lo) {
    for (int hi = lo; hi < 4; ++hi) {
      boxes.push_back(*Box::Make({lo}, {hi}));
      for (int lo1 = 0; lo1 < 4; lo1 += 2) boxes.push_back(*Box::Make({lo, lo1}, {hi, lo1 + 2}));
    }
  }
  boxes.push_back(Box{});  // ndim 0
  int overlapping = 0;
  for (const Box& a : boxes) {
    for (const Box& b : boxes) {
      EXPECT_EQ(a.Intersects(b), !a.Intersect(b).Empty()) << a.ToString() << " " << b.ToString();
      overlapping += a.Intersects(b) ? 1 : 0;
    }
  }
  EXPECT_GT(overlapping, 50);
  EXPECT_FALSE(Box::Make({0}, {2})->Intersects(*Box::Make({2}, {4})));  // touching
  EXPECT_FALSE(Box::Make({0}, {4})->Intersects(*Box::Make({0, 0}, {4, 4})));  // other ndim
}

TEST(BoxTest, MakeRejectsBadInput) {
  EXPECT_FALSE(Box::Make({0}, {1, 2}).ok());
  EXPECT_FALSE(Box::Make({}, {}).ok());
  EXPECT_FALSE(Box::Make({3}, {2}).ok());
  EXPECT_FALSE(Box::Make(std::vector<int64_t>(9, 0), std::vector<int64_t>(9, 1)).ok());
}

TEST(LayoutTest, AppendAndPlaceGrowBuffers) {
  Layout l;
  int t = *l.AddTensor({"w", {4, 6}, DType::kBF16});
  EXPECT_EQ(*l.AddTensor({"w", {4, 6}, DType::kBF16}), t);
  EXPECT_FALSE(l.AddTensor({"w", {4, 7}, DType::kBF16}).ok());
  int f0 = l.AppendFragment(t, *Box::Make({0, 0}, {2, 6}), 3, "buf");
  int f1 = l.AppendFragment(t, *Box::Make({2, 0}, {4, 6}), 3, "buf");
  EXPECT_EQ(l.fragments[f0].loc.byte_offset, 0);
  EXPECT_EQ(l.fragments[f1].loc.byte_offset, 24);
  EXPECT_EQ(l.fragments[f1].loc.strides[0], 6);
  EXPECT_EQ(l.fragments[f1].loc.strides[1], 1);
  ASSERT_EQ(l.buffers.size(), 1u);
  EXPECT_EQ(l.buffers[0].bytes, 48);
  // A strided placement: a 4x3 column block inside a 4x6 row-major buffer at column 3.
  int f2 = l.PlaceFragment(t, *Box::Make({0, 3}, {4, 6}), 5, "wide", 6, {6, 1});
  const std::pair<int64_t, int64_t> span{6, 42};
  EXPECT_EQ(l.FragmentSpan(l.fragments[f2]), span);
  EXPECT_EQ(l.buffers[1].bytes, 48);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{3, 5}));
  EXPECT_EQ(l.BytesPerRank()[3], 48);
  EXPECT_EQ(l.LogicalBytes(), 48);
}

TEST(LayoutTest, NameLookupsFollowDirectVectorEdits) {
  Layout l;
  ASSERT_TRUE(l.AddTensor({"a", {2}, DType::kFP32}).ok());
  l.GetOrAddBuffer(0, "x");
  // Appended directly: found by the const lookups and indexed by the next mutation.
  l.tensors.push_back({"b", {3}, DType::kFP32});
  l.buffers.push_back({1, "y", 0});
  EXPECT_EQ(l.FindTensor("b"), 1);
  EXPECT_EQ(l.FindBuffer(1, "y"), 1);
  EXPECT_EQ(*l.AddTensor({"b", {3}, DType::kFP32}), 1);
  EXPECT_EQ(l.GetOrAddBuffer(1, "y"), 1);
  // Cleared and refilled with the same count: the stale index is not trusted.
  l.tensors.clear();
  l.tensors.push_back({"c", {1}, DType::kFP32});
  l.tensors.push_back({"d", {1}, DType::kFP32});
  EXPECT_EQ(l.FindTensor("d"), 1);
  EXPECT_EQ(l.FindTensor("a"), -1);
  EXPECT_EQ(*l.AddTensor({"c", {1}, DType::kFP32}), 0);
  EXPECT_EQ(l.tensors.size(), 2u);
  l.buffers.clear();
  EXPECT_EQ(l.FindBuffer(0, "x"), -1);
  EXPECT_EQ(l.GetOrAddBuffer(0, "x"), 0);
}

TEST(LayoutTest, TensorNamesKnownDistinctOnlyThroughTheIndex) {
  Layout l;
  EXPECT_TRUE(l.TensorNamesKnownDistinct());
  ASSERT_TRUE(l.AddTensor({"a", {2}, DType::kBF16}).ok());
  ASSERT_TRUE(l.AddTensor({"b", {2}, DType::kBF16}).ok());
  ASSERT_TRUE(l.AddTensor({"a", {2}, DType::kBF16}).ok());  // the existing one
  EXPECT_TRUE(l.TensorNamesKnownDistinct());
  // Appended directly: unknown until indexed, even when still distinct.
  l.tensors.push_back({"c", {2}, DType::kBF16});
  EXPECT_FALSE(l.TensorNamesKnownDistinct());
  l.tensors.push_back({"a", {2}, DType::kBF16});
  EXPECT_FALSE(l.TensorNamesKnownDistinct());
  EXPECT_EQ(l.FindTensor("a"), 0);
}

TEST(TopologyTest, UniformNodesAndLinks) {
  Topology t = Topology::Uniform(16, 8);
  EXPECT_EQ(t.NumNodes(), 2);
  EXPECT_EQ(t.NodeOf(9), 1);
  EXPECT_EQ(t.Link(3, 3), LinkClass::kSameRank);
  EXPECT_EQ(t.Link(0, 7), LinkClass::kSameNode);
  EXPECT_EQ(t.Link(7, 8), LinkClass::kNetwork);
  EXPECT_EQ(t.NicsPerNode(), 8);
  EXPECT_DOUBLE_EQ(t.NodeNetworkBandwidth(), 8 * t.nic_bandwidth);
}

}  // namespace
}  // namespace ferry
