// Tests for the layout builders against hand-computed fragments.
#include "core/layout/builders.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ferry {
namespace {

Box B(std::vector<int64_t> lo, std::vector<int64_t> hi) { return *Box::Make(lo, hi); }

// What a test expects of one fragment.
struct Expected {
  std::string tensor;
  int rank;
  Box box;
  int64_t byte_offset;
  std::vector<int64_t> strides;
};

void ExpectFragments(const Layout& l, const std::vector<Expected>& want) {
  ASSERT_EQ(l.fragments.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Fragment& f = l.fragments[i];
    SCOPED_TRACE("fragment " + std::to_string(i));
    EXPECT_EQ(l.tensors[f.tensor].name, want[i].tensor);
    EXPECT_EQ(f.loc.rank, want[i].rank);
    EXPECT_EQ(l.buffers[f.loc.buffer].rank, want[i].rank);
    EXPECT_EQ(f.box, want[i].box) << f.box.ToString() << " vs " << want[i].box.ToString();
    EXPECT_EQ(f.loc.byte_offset, want[i].byte_offset);
    for (size_t d = 0; d < want[i].strides.size(); ++d) {
      EXPECT_EQ(f.loc.strides[d], want[i].strides[d]) << "dim " << d;
    }
  }
}

std::vector<std::pair<int, Box>> Boxes(const TensorSpec& t, const DeviceMesh& m,
                                       const std::vector<Placement>& p) {
  auto r = MeshBoxes(t, m, p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<std::pair<int, Box>>{};
}

TEST(SplitTest, ChunkAndEven) {
  EXPECT_EQ(ChunkSizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(ChunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(ChunkSizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(*EvenSizes(12, 3), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_FALSE(EvenSizes(10, 4).ok());
  EXPECT_FALSE(EvenSizes(10, 0).ok());
}

TEST(MeshTest, TwoDimsShardTwoTensorDims) {
  TensorSpec t{"w", {8, 6}, DType::kBF16};
  auto boxes = Boxes(t, DeviceMesh::Make({2, 2}, {10, 11, 12, 13}), {Shard(0), Shard(1)});
  std::vector<std::pair<int, Box>> want = {{10, B({0, 0}, {4, 3})},
                                           {11, B({0, 3}, {4, 6})},
                                           {12, B({4, 0}, {8, 3})},
                                           {13, B({4, 3}, {8, 6})}};
  EXPECT_EQ(boxes, want);
}

TEST(MeshTest, ReplicateAndShard) {
  TensorSpec t{"w", {8, 6}, DType::kBF16};
  auto boxes = Boxes(t, DeviceMesh::Iota({2, 2}), {Replicate(), Shard(0)});
  std::vector<std::pair<int, Box>> want = {{0, B({0, 0}, {4, 6})},
                                           {1, B({4, 0}, {8, 6})},
                                           {2, B({0, 0}, {4, 6})},
                                           {3, B({4, 0}, {8, 6})}};
  EXPECT_EQ(boxes, want);
}

TEST(MeshTest, SameTensorDimNestsMeshDimZeroFirst) {
  TensorSpec t{"w", {10}, DType::kFP32};
  // Mesh dim 0 splits [0,10) into [0,5) and [5,10); mesh dim 1 splits each by the chunk rule (3,
  // 2).
  auto boxes = Boxes(t, DeviceMesh::Iota({2, 2}, 4), {Shard(0), Shard(0)});
  std::vector<std::pair<int, Box>> want = {
      {4, B({0}, {3})}, {5, B({3}, {5})}, {6, B({5}, {8})}, {7, B({8}, {10})}};
  EXPECT_EQ(boxes, want);
}

TEST(MeshTest, ThreeDimMeshMixed) {
  TensorSpec t{"w", {4, 8}, DType::kBF16};
  // {pp-like replicate, shard cols, shard rows}; ranks in any order.
  auto boxes = Boxes(t, DeviceMesh::Make({2, 2, 2}, {7, 6, 5, 4, 3, 2, 1, 0}),
                     {Replicate(), Shard(1), Shard(0)});
  ASSERT_EQ(boxes.size(), 8u);
  EXPECT_EQ(boxes[0], std::make_pair(7, B({0, 0}, {2, 4})));
  EXPECT_EQ(boxes[1], std::make_pair(6, B({2, 0}, {4, 4})));
  EXPECT_EQ(boxes[2], std::make_pair(5, B({0, 4}, {2, 8})));
  EXPECT_EQ(boxes[3], std::make_pair(4, B({2, 4}, {4, 8})));
  EXPECT_EQ(boxes[4], std::make_pair(3, B({0, 0}, {2, 4})));
  EXPECT_EQ(boxes[7], std::make_pair(0, B({2, 4}, {4, 8})));
}

TEST(MeshTest, UnevenChunkRuleAndExplicitSizes) {
  TensorSpec t{"w", {10, 2}, DType::kBF16};
  auto chunk = Boxes(t, DeviceMesh::Iota({4}), {Shard(0)});
  ASSERT_EQ(chunk.size(), 4u);
  EXPECT_EQ(chunk[0].second, B({0, 0}, {3, 2}));
  EXPECT_EQ(chunk[3].second, B({9, 0}, {10, 2}));

  auto explicit_sizes = Boxes(t, DeviceMesh::Iota({3}), {ShardUneven(0, {1, 5, 4})});
  ASSERT_EQ(explicit_sizes.size(), 3u);
  EXPECT_EQ(explicit_sizes[0].second, B({0, 0}, {1, 2}));
  EXPECT_EQ(explicit_sizes[1].second, B({1, 0}, {6, 2}));
  EXPECT_EQ(explicit_sizes[2].second, B({6, 0}, {10, 2}));

  // Nested explicit sizes split each parent shard.
  auto nested = Boxes(t, DeviceMesh::Iota({2, 2}), {Shard(0), ShardUneven(0, {1, 4})});
  ASSERT_EQ(nested.size(), 4u);
  EXPECT_EQ(nested[1].second, B({1, 0}, {5, 2}));
  EXPECT_EQ(nested[2].second, B({5, 0}, {6, 2}));

  EXPECT_FALSE(MeshBoxes(t, DeviceMesh::Iota({3}), {ShardUneven(0, {1, 5, 5})}).ok());
  EXPECT_FALSE(MeshBoxes(t, DeviceMesh::Iota({3}), {ShardUneven(0, {5, 5})}).ok());
}

TEST(MeshTest, RejectsBadMeshes) {
  TensorSpec t{"w", {8, 6}, DType::kBF16};
  EXPECT_FALSE(MeshBoxes(t, DeviceMesh::Make({2, 2}, {0, 1, 2}), {Shard(0), Shard(1)}).ok());
  EXPECT_FALSE(MeshBoxes(t, DeviceMesh::Iota({2}), {Shard(0), Shard(1)}).ok());
  auto bad_dim = MeshBoxes(t, DeviceMesh::Iota({2}), {Shard(2)});
  ASSERT_FALSE(bad_dim.ok());
  EXPECT_NE(bad_dim.status().message().find("'w'"), std::string::npos);
  EXPECT_FALSE(MeshBoxes({"x", {0, 2}, DType::kBF16}, DeviceMesh::Iota({1}), {Shard(0)}).ok());
}

TEST(MeshTest, AddMeshShardedSkipsEmptyShardsAndAppends) {
  Layout l;
  TensorSpec t{"a", {5}, DType::kFP32};
  ASSERT_TRUE(AddMeshSharded(l, t, DeviceMesh::Iota({4}), {Shard(0)}).ok());
  ExpectFragments(l, {{"a", 0, B({0}, {2}), 0, {1}},
                      {"a", 1, B({2}, {4}), 0, {1}},
                      {"a", 2, B({4}, {5}), 0, {1}}});
  // A second tensor in the same named buffer lands after the first.
  TensorSpec u{"b", {4}, DType::kFP32};
  ASSERT_TRUE(AddMeshSharded(l, u, DeviceMesh::Iota({2}), {Shard(0)}, "a").ok());
  EXPECT_EQ(l.fragments[3].loc.rank, 0);
  EXPECT_EQ(l.fragments[3].loc.byte_offset, 8);
  EXPECT_EQ(l.fragments[4].loc.byte_offset, 8);
  EXPECT_EQ(l.buffers[l.FindBuffer(1, "a")].bytes, 16);
}

TEST(MegatronTest, ColumnRowReplicated) {
  Layout l;
  TensorSpec w{"w", {8, 4}, DType::kBF16};
  ASSERT_TRUE(AddColumnParallel(l, w, {3, 9}).ok());
  TensorSpec o{"o", {4, 8}, DType::kBF16};
  ASSERT_TRUE(AddRowParallel(l, o, {3, 9}).ok());
  TensorSpec n{"n", {4}, DType::kFP32};
  ASSERT_TRUE(AddReplicated(l, n, {3, 9}).ok());
  ExpectFragments(l, {{"w", 3, B({0, 0}, {4, 4}), 0, {4, 1}},
                      {"w", 9, B({4, 0}, {8, 4}), 0, {4, 1}},
                      {"o", 3, B({0, 0}, {4, 4}), 0, {4, 1}},
                      {"o", 9, B({0, 4}, {4, 8}), 0, {4, 1}},
                      {"n", 3, B({0}, {4}), 0, {1}},
                      {"n", 9, B({0}, {4}), 0, {1}}});
  EXPECT_FALSE(AddColumnParallel(l, {"x", {7, 4}, DType::kBF16}, {0, 1}).ok());
  EXPECT_FALSE(AddRowParallel(l, {"y", {8}, DType::kBF16}, {0, 1}).ok());
  EXPECT_FALSE(AddReplicated(l, {"z", {8}, DType::kBF16}, {}).ok());
  EXPECT_EQ(l.FindTensor("x"), -1);
}

TEST(MegatronTest, VocabParallelPadsBuffers) {
  Layout l;
  // 10 rows padded to a multiple of 2 * 4 = 8: 16 rows, 4 per rank; rank 3 holds only padding.
  TensorSpec e{"embed", {10, 4}, DType::kBF16};
  ASSERT_TRUE(AddVocabParallel(l, e, {0, 1, 2, 3}, 2).ok());
  ExpectFragments(l, {{"embed", 0, B({0, 0}, {4, 4}), 0, {4, 1}},
                      {"embed", 1, B({4, 0}, {8, 4}), 0, {4, 1}},
                      {"embed", 2, B({8, 0}, {10, 4}), 0, {4, 1}}});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(l.buffers[l.FindBuffer(r, "embed")].bytes, 32) << r;
  EXPECT_FALSE(AddVocabParallel(l, {"e2", {10, 4}, DType::kBF16}, {0, 1}, 0).ok());
}

TEST(MegatronTest, PipelineStagesAndExpertOwners) {
  EXPECT_EQ(*PipelineStages(10, 4), (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(*PipelineStages(4, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(PipelineStages(3, 4).ok());
  EXPECT_FALSE(PipelineStages(3, 0).ok());
  EXPECT_EQ(*ExpertOwners(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_FALSE(ExpertOwners(6, 4).ok());
  EXPECT_FALSE(ExpertOwners(6, 0).ok());
}

TEST(FlatRangeTest, HandComputed) {
  // [7, 53) of [3,4,5]: 7 = (0,1,2), 53 = (2,2,3).
  auto boxes = FlatRangeToBoxes({3, 4, 5}, 7, 53);
  std::vector<Box> want = {B({0, 1, 2}, {1, 2, 5}), B({0, 2, 0}, {1, 4, 5}),
                           B({1, 0, 0}, {2, 4, 5}), B({2, 0, 0}, {3, 2, 5}),
                           B({2, 2, 0}, {3, 3, 3})};
  EXPECT_EQ(boxes, want);
  EXPECT_EQ(FlatRangeToBoxes({3, 4, 5}, 0, 60), (std::vector<Box>{B({0, 0, 0}, {3, 4, 5})}));
  EXPECT_EQ(FlatRangeToBoxes({3, 4, 5}, 20, 40), (std::vector<Box>{B({1, 0, 0}, {2, 4, 5})}));
  EXPECT_EQ(FlatRangeToBoxes({3, 4, 5}, 21, 23), (std::vector<Box>{B({1, 0, 1}, {2, 1, 3})}));
  EXPECT_TRUE(FlatRangeToBoxes({3, 4, 5}, 9, 9).empty());
}

TEST(FlatRangeTest, RandomRangesCoverExactly) {
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 3000; ++iter) {
    const int ndim = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> shape(ndim);
    int64_t total = 1;
    for (int64_t& s : shape) {
      s = 1 + static_cast<int64_t>(rng() % 5);
      total *= s;
    }
    int64_t a = static_cast<int64_t>(rng() % (total + 1));
    int64_t b = static_cast<int64_t>(rng() % (total + 1));
    if (a > b) std::swap(a, b);
    auto boxes = FlatRangeToBoxes(shape, a, b);
    ASSERT_LE(static_cast<int>(boxes.size()), 2 * ndim - 1);
    std::vector<int> hits(total, 0);
    auto strides = RowMajorStrides(shape);
    int64_t expected_first = a;
    for (const Box& box : boxes) {
      ASSERT_FALSE(box.Empty());
      ASSERT_TRUE(Box::FromShape(shape).Contains(box));
      // Boxes come in flat order, each a contiguous flat run.
      int64_t first = 0;
      for (int d = 0; d < ndim; ++d) first += box.lo[d] * strides[d];
      EXPECT_EQ(first, expected_first);
      expected_first += box.Volume();
      std::vector<int64_t> idx(box.Lo());
      for (int64_t n = 0; n < box.Volume(); ++n) {
        int64_t flat = 0;
        for (int d = 0; d < ndim; ++d) flat += idx[d] * strides[d];
        ++hits[flat];
        for (int d = ndim - 1; d >= 0; --d) {
          if (++idx[d] < box.hi[d]) break;
          idx[d] = box.lo[d];
        }
      }
    }
    for (int64_t i = 0; i < total; ++i) {
      ASSERT_EQ(hits[i], (i >= a && i < b) ? 1 : 0)
          << "element " << i << " of range [" << a << ", " << b << ")";
    }
  }
}

TEST(FsdpTest, FlatShardsHandComputed) {
  Layout l;
  // a: 6 elements, b: 4; 10 padded to 12 over 3 ranks: chunks of 4 (bf16: 8 bytes).
  std::vector<TensorSpec> ts = {{"a", {2, 3}, DType::kBF16}, {"b", {4}, DType::kBF16}};
  ASSERT_TRUE(AddFsdpFlatSharded(l, ts, {5, 6, 7}, "flat").ok());
  ExpectFragments(l, {{"a", 5, B({0, 0}, {1, 3}), 0, {3, 1}},
                      {"a", 5, B({1, 0}, {2, 1}), 6, {3, 1}},
                      {"a", 6, B({1, 1}, {2, 3}), 0, {3, 1}},
                      {"b", 6, B({0}, {2}), 4, {1}},
                      {"b", 7, B({2}, {4}), 0, {1}}});
  for (int r : {5, 6, 7}) EXPECT_EQ(l.buffers[l.FindBuffer(r, "flat")].bytes, 8);
}

TEST(FsdpTest, AlignmentPadsChunks) {
  Layout l;
  std::vector<TensorSpec> ts = {{"a", {2, 3}, DType::kFP32}, {"b", {4}, DType::kFP32}};
  // Aligned to 3 * 3 = 9: 18 elements, chunks of 6; rank 2 holds only padding.
  ASSERT_TRUE(AddFsdpFlatSharded(l, ts, {0, 1, 2}, "flat", 3).ok());
  ExpectFragments(l, {{"a", 0, B({0, 0}, {2, 3}), 0, {3, 1}}, {"b", 1, B({0}, {4}), 0, {1}}});
  EXPECT_EQ(l.buffers[l.FindBuffer(2, "flat")].bytes, 24);
  EXPECT_FALSE(
      AddFsdpFlatSharded(l, {{"c", {2}, DType::kFP32}, {"d", {2}, DType::kBF16}}, {0}, "f2").ok());
  EXPECT_EQ(l.FindTensor("c"), -1);
}

TEST(FsdpTest, ManyRanksCoverEveryElementOnce) {
  Layout l;
  std::vector<TensorSpec> ts = {
      {"a", {7, 5, 3}, DType::kBF16}, {"b", {11}, DType::kBF16}, {"c", {4, 9}, DType::kBF16}};
  ASSERT_TRUE(AddFsdpFlatSharded(l, ts, {0, 1, 2, 3, 4, 5, 6}, "flat", 2).ok());
  for (size_t t = 0; t < ts.size(); ++t) {
    int64_t covered = 0;
    for (const Fragment& f : l.fragments) {
      if (f.tensor == static_cast<int>(t)) covered += f.box.Volume();
    }
    EXPECT_EQ(covered, ts[t].NumElements()) << ts[t].name;
  }
  // Every fragment lies inside its rank's chunk.
  for (const Fragment& f : l.fragments) {
    auto [off, len] = l.FragmentSpan(f);
    EXPECT_LE(off + len, l.buffers[f.loc.buffer].bytes);
  }
}

TEST(FusedTest, ConcatDimZeroWithBaseOffset) {
  Layout l;
  TensorSpec q{"q", {8, 4}, DType::kBF16}, k{"k", {4, 4}, DType::kBF16},
      v{"v", {4, 4}, DType::kBF16};
  // One TP rank's qkv_proj: q rows [0,4), k rows [0,2), v rows [0,2); placed at byte 100.
  ASSERT_TRUE(AddFusedConcat(
                  l, 2, "qkv",
                  {{q, B({0, 0}, {4, 4})}, {k, B({0, 0}, {2, 4})}, {v, B({0, 0}, {2, 4})}}, 0, 100)
                  .ok());
  ExpectFragments(l, {{"q", 2, B({0, 0}, {4, 4}), 100, {4, 1}},
                      {"k", 2, B({0, 0}, {2, 4}), 132, {4, 1}},
                      {"v", 2, B({0, 0}, {2, 4}), 148, {4, 1}}});
  EXPECT_EQ(l.buffers[l.FindBuffer(2, "qkv")].bytes, 164);
}

TEST(FusedTest, ConcatDimOne) {
  Layout l;
  TensorSpec a{"a", {4, 6}, DType::kFP32}, b{"b", {4, 2}, DType::kFP32};
  ASSERT_TRUE(AddFusedConcat(l, 0, "ab", {{a, B({0, 3}, {4, 6})}, {b, B({0, 0}, {4, 2})}}, 1).ok());
  // Fused shape [4, 5]: a's columns 3..5 at column 0, b at column 3.
  ExpectFragments(
      l, {{"a", 0, B({0, 3}, {4, 6}), 0, {5, 1}}, {"b", 0, B({0, 0}, {4, 2}), 12, {5, 1}}});
  EXPECT_EQ(l.buffers[0].bytes, 80);
  // Mismatched extents in a non-concat dim are rejected.
  EXPECT_FALSE(
      AddFusedConcat(l, 0, "bad", {{a, B({0, 0}, {4, 6})}, {b, B({0, 0}, {3, 2})}}, 1).ok());
  // A box outside its tensor is rejected.
  EXPECT_FALSE(AddFusedConcat(l, 0, "bad", {{b, B({0, 0}, {4, 3})}}, 1).ok());
}

TEST(FusedTest, MegatronQkvGqa) {
  Layout l;
  // 8 heads in 2 groups, head_dim 4, hidden 3, tp 2: each rank holds one group of
  // [4 q heads (16 rows) | k (4 rows) | v (4 rows)] = 24 rows of 3 bf16 = 144 bytes.
  TensorSpec q{"q", {32, 3}, DType::kBF16}, k{"k", {8, 3}, DType::kBF16},
      v{"v", {8, 3}, DType::kBF16};
  ASSERT_TRUE(AddMegatronQkvInterleaved(l, q, k, v, 8, 2, 4, {0, 1}, "linear_qkv").ok());
  ExpectFragments(l, {{"q", 0, B({0, 0}, {16, 3}), 0, {3, 1}},
                      {"k", 0, B({0, 0}, {4, 3}), 96, {3, 1}},
                      {"v", 0, B({0, 0}, {4, 3}), 120, {3, 1}},
                      {"q", 1, B({16, 0}, {32, 3}), 0, {3, 1}},
                      {"k", 1, B({4, 0}, {8, 3}), 96, {3, 1}},
                      {"v", 1, B({4, 0}, {8, 3}), 120, {3, 1}}});
  for (int r : {0, 1}) EXPECT_EQ(l.buffers[l.FindBuffer(r, "linear_qkv")].bytes, 144);
}

TEST(FusedTest, MegatronQkvTwoGroupsPerRank) {
  Layout l;
  TensorSpec q{"q", {32, 3}, DType::kBF16}, k{"k", {8, 3}, DType::kBF16},
      v{"v", {8, 3}, DType::kBF16};
  ASSERT_TRUE(AddMegatronQkvInterleaved(l, q, k, v, 8, 2, 4, {6}, "qkv").ok());
  ExpectFragments(l, {{"q", 6, B({0, 0}, {16, 3}), 0, {3, 1}},
                      {"k", 6, B({0, 0}, {4, 3}), 96, {3, 1}},
                      {"v", 6, B({0, 0}, {4, 3}), 120, {3, 1}},
                      {"q", 6, B({16, 0}, {32, 3}), 144, {3, 1}},
                      {"k", 6, B({4, 0}, {8, 3}), 240, {3, 1}},
                      {"v", 6, B({4, 0}, {8, 3}), 264, {3, 1}}});
  // Groups that do not split over tp, or wrong k shape, are rejected.
  Layout l2;
  EXPECT_FALSE(AddMegatronQkvInterleaved(l2, q, k, v, 8, 2, 4, {0, 1, 2}, "qkv").ok());
  EXPECT_FALSE(
      AddMegatronQkvInterleaved(l2, q, {"k", {4, 3}, DType::kBF16}, v, 8, 2, 4, {0}, "qkv").ok());
  EXPECT_TRUE(l2.fragments.empty());
}

TEST(FusedTest, MegatronQkvBiasIsOneDim) {
  Layout l;
  // Bias: q [8], k and v [4]; 4 heads in 2 groups of head_dim 2, tp 2. Rank i: q [4i, 4i+4) at
  // element 0, k [2i, 2i+2) at element 4, v at element 6 (fp32: bytes 0, 16, 24).
  TensorSpec q{"qb", {8}, DType::kFP32}, k{"kb", {4}, DType::kFP32}, v{"vb", {4}, DType::kFP32};
  ASSERT_TRUE(AddMegatronQkvInterleaved(l, q, k, v, 4, 2, 2, {0, 1}, "qkv_bias").ok());
  ExpectFragments(l, {{"qb", 0, B({0}, {4}), 0, {1}},
                      {"kb", 0, B({0}, {2}), 16, {1}},
                      {"vb", 0, B({0}, {2}), 24, {1}},
                      {"qb", 1, B({4}, {8}), 0, {1}},
                      {"kb", 1, B({2}, {4}), 16, {1}},
                      {"vb", 1, B({2}, {4}), 24, {1}}});
}

TEST(BuilderScaleTest, ManyBuffersStayFast) {
  // 2000 tensors x 64 ranks = 128k fragments and buffers: must not be quadratic.
  Layout l;
  std::vector<int> ranks(64);
  for (int i = 0; i < 64; ++i) ranks[i] = i;
  for (int t = 0; t < 2000; ++t) {
    ASSERT_TRUE(AddColumnParallel(l, {"t" + std::to_string(t), {64, 8}, DType::kBF16}, ranks).ok());
  }
  EXPECT_EQ(l.fragments.size(), 128000u);
  EXPECT_EQ(l.FindBuffer(63, "t1999"), static_cast<int>(l.buffers.size()) - 1);
}

}  // namespace
}  // namespace ferry
