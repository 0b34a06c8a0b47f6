// Tests for layout validation: one test per kind of bad input, each checking that the message names
// the tensor, the ranks and the region; good layouts from every builder pass.
#include "core/layout/validate.h"

#include <gtest/gtest.h>

#include <chrono>

#include "core/layout/builders.h"

namespace ferry {
namespace {

Box B(std::vector<int64_t> lo, std::vector<int64_t> hi) { return *Box::Make(lo, hi); }

void ExpectError(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << parts[0];
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

#define EXPECT_OK(expr)                    \
  do {                                     \
    Status s_ = (expr);                    \
    EXPECT_TRUE(s_.ok()) << s_.ToString(); \
  } while (false)

// w [8, 8] bf16 column-parallel over ranks 0 and 1.
Layout ColumnLayout() {
  Layout l;
  EXPECT_OK(AddColumnParallel(l, {"w", {8, 8}, DType::kBF16}, {0, 1}));
  return l;
}

TEST(ValidateTest, GoodLayoutsFromBuildersPass) {
  Layout l;
  EXPECT_OK(AddMeshSharded(l, {"a", {10, 6}, DType::kBF16}, DeviceMesh::Iota({2, 2}),
                           {Shard(0), Shard(0)}));
  EXPECT_OK(AddMeshSharded(l, {"b", {8, 6}, DType::kBF16}, DeviceMesh::Iota({2, 2}),
                           {Replicate(), Shard(1)}));
  EXPECT_OK(AddVocabParallel(l, {"embed", {10, 4}, DType::kBF16}, {0, 1, 2, 3}, 2));
  EXPECT_OK(AddReplicated(l, {"norm", {6}, DType::kFP32}, {0, 1, 2, 3}));
  EXPECT_OK(AddFsdpFlatSharded(l, {{"f1", {7, 5, 3}, DType::kBF16}, {"f2", {11}, DType::kBF16}},
                               {0, 1, 2}, "flat", 4));
  EXPECT_OK(AddMegatronQkvInterleaved(l, {"q", {32, 3}, DType::kBF16}, {"k", {8, 3}, DType::kBF16},
                                      {"v", {8, 3}, DType::kBF16}, 8, 2, 4, {0, 1}, "qkv"));
  // Fused along dim 1: both pieces interleave row by row in one buffer.
  TensorSpec g{"gate", {4, 6}, DType::kBF16}, u{"up", {4, 6}, DType::kBF16};
  EXPECT_OK(AddFusedConcat(l, 3, "gate_up",
                           {{g, Box::FromShape(g.shape)}, {u, Box::FromShape(u.shape)}}, 1));
  EXPECT_OK(ValidateLayout(l));
  ValidateOptions known;
  known.known_ranks = std::set<int>{0, 1, 2, 3};
  EXPECT_OK(ValidateLayout(l, known));
}

TEST(ValidateTest, CompatibleAndShapeMismatch) {
  Layout src = ColumnLayout();
  Layout dst;
  EXPECT_OK(AddRowParallel(dst, {"w", {8, 8}, DType::kBF16}, {4, 5}));
  EXPECT_OK(CheckCompatible(src, dst));
  Layout bad;
  EXPECT_OK(AddRowParallel(bad, {"w", {8, 6}, DType::kBF16}, {4, 5}));
  ExpectError(CheckCompatible(src, bad), {"'w'", "[8, 8]", "[8, 6]", "[0, 1]", "[4, 5]"});
}

TEST(ValidateTest, DtypeMismatch) {
  Layout src = ColumnLayout();
  Layout dst;
  EXPECT_OK(AddReplicated(dst, {"w", {8, 8}, DType::kFP32}, {6}));
  ExpectError(CheckCompatible(src, dst), {"'w'", "bf16", "fp32", "[0, 1]", "[6]"});
}

TEST(ValidateTest, MissingSourceTensor) {
  Layout src = ColumnLayout();
  Layout dst;
  EXPECT_OK(AddReplicated(dst, {"v", {4}, DType::kBF16}, {2, 3}));
  ExpectError(CheckCompatible(src, dst), {"'v'", "[4]", "[2, 3]", "not in the source"});
}

TEST(ValidateTest, BoxOutOfBounds) {
  Layout l = ColumnLayout();
  l.fragments.Edit(1, [&](Fragment& frag) { frag.box = B({4, 0}, {9, 8}); });
  l.buffers.SetBytes(1, 1000);
  ExpectError(ValidateLayout(l), {"'w'", "[4:9, 0:8)", "rank 1", "out of bounds", "[8, 8]"});
}

TEST(ValidateTest, BoxWithWrongRank) {
  Layout l = ColumnLayout();
  l.fragments.Edit(0, [&](Fragment& frag) { frag.box = B({0}, {4}); });
  ExpectError(ValidateLayout(l), {"'w'", "[0:4)", "rank 0", "1 dims"});
}

TEST(ValidateTest, ContiguousFragmentsOverlapInMemory) {
  Layout l;
  int a = *l.AddTensor({"a", {4, 4}, DType::kFP32});
  int b = *l.AddTensor({"b", {4}, DType::kFP32});
  l.PlaceFragment(a, B({0, 0}, {4, 4}), 2, "buf", 0, {4, 1});
  l.PlaceFragment(b, B({0}, {4}), 2, "buf", 60,
                  {1});  // shares bytes [60, 64) with a's last element
  ExpectError(ValidateLayout(l),
              {"'a'", "'b'", "[0:4, 0:4)", "[0:4)", "rank 2", "'buf'", "overlap in memory"});
  // Placed right after, they are fine.
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.byte_offset = 64; });
  l.buffers.SetBytes(0, 80);
  EXPECT_OK(ValidateLayout(l));
  // The same byte offset in another buffer of the same rank is fine too.
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.byte_offset = 0; });
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.buffer = l.GetOrAddBuffer(2, "other"); });
  l.buffers.SetBytes(static_cast<size_t>(l.fragments[1].loc.buffer), 16);
  EXPECT_OK(ValidateLayout(l));
}

TEST(ValidateTest, StridedColumnStripsInterleaveWithoutOverlap) {
  // A row-major [4, 6] bf16 buffer holding column strips [0:2), [2:5), [5:6) of three tensors.
  Layout l;
  int x = *l.AddTensor({"x", {4, 2}, DType::kBF16});
  int y = *l.AddTensor({"y", {4, 3}, DType::kBF16});
  int z = *l.AddTensor({"z", {4, 1}, DType::kBF16});
  l.PlaceFragment(x, B({0, 0}, {4, 2}), 0, "fused", 0, {6, 1});
  l.PlaceFragment(y, B({0, 0}, {4, 3}), 0, "fused", 4, {6, 1});
  l.PlaceFragment(z, B({0, 0}, {4, 1}), 0, "fused", 10, {6, 1});
  EXPECT_OK(ValidateLayout(l));
  // Shift y one column left: its first column now shares bytes with x's second column.
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.byte_offset = 2; });
  ExpectError(ValidateLayout(l), {"'x'", "'y'", "rank 0", "'fused'", "overlap in memory"});
  EXPECT_EQ(ValidateLayout(l).message().find("conservative"), std::string::npos);
}

TEST(ValidateTest, InterleavedRowsDifferentDtypes) {
  // Even rows hold fp32 a, odd rows hold two bf16 halves... expressed as an fp32 tensor on even
  // rows and a bf16 tensor of twice the columns on odd rows of a 16-byte-wide buffer.
  Layout l;
  int a = *l.AddTensor({"a", {3, 4}, DType::kFP32});
  int b = *l.AddTensor({"b", {3, 8}, DType::kBF16});
  l.PlaceFragment(a, B({0, 0}, {3, 4}), 0, "buf", 0, {8, 1});    // row stride 32 bytes
  l.PlaceFragment(b, B({0, 0}, {3, 8}), 0, "buf", 16, {16, 1});  // row stride 32 bytes
  EXPECT_OK(ValidateLayout(l));
  l.fragments.Edit(1, [&](Fragment& frag) {
    frag.loc.byte_offset = 14;
  });  // b's first element now overlaps a's last column
  ExpectError(ValidateLayout(l), {"'a'", "'b'", "overlap in memory"});
}

TEST(ValidateTest, NonNestedStridesAreConservative) {
  // int8: a at bytes {0, 3, 6}, b at bytes {1, 5}; they share no byte but strides 3 and 4 do not
  // nest, so the check reports the overlapping spans and says it was conservative.
  Layout l;
  int a = *l.AddTensor({"a", {3}, DType::kInt8});
  int b = *l.AddTensor({"b", {2}, DType::kInt8});
  l.PlaceFragment(a, B({0}, {3}), 1, "buf", 0, {3});
  l.PlaceFragment(b, B({0}, {2}), 1, "buf", 1, {4});
  ExpectError(ValidateLayout(l), {"'a'", "'b'", "rank 1", "conservative"});
}

TEST(ValidateTest, FragmentOverlapsItself) {
  Layout l;
  int a = *l.AddTensor({"a", {2, 2}, DType::kFP32});
  l.PlaceFragment(a, B({0, 0}, {2, 2}), 0, "buf", 0, {1, 1});
  ExpectError(ValidateLayout(l), {"'a'", "[0:2, 0:2)", "rank 0", "same bytes"});
}

TEST(ValidateTest, UncoveredRegion) {
  Layout l = ColumnLayout();
  l.fragments.pop_back();
  ExpectError(ValidateLayout(l), {"'w'", "region [4:8, 0:8)", "covered by no fragment", "[0]"});
  ValidateOptions partial;
  partial.require_full_coverage = false;
  EXPECT_OK(ValidateLayout(l, partial));
  l.AddPadding(0, B({4, 0}, {8, 8}));
  EXPECT_OK(ValidateLayout(l));
}

TEST(ValidateTest, UncoveredRegionInsideSecondDim) {
  Layout l;
  EXPECT_OK(AddMeshSharded(l, {"w", {8, 6}, DType::kBF16}, DeviceMesh::Iota({2, 2}),
                           {Shard(0), Shard(1)}));
  l.fragments.Erase(1);  // rank 1's [0:4, 3:6)
  ExpectError(ValidateLayout(l), {"'w'", "region [0:4, 3:6)", "[0, 2, 3]"});
  // Padding covering only part of the hole is not enough.
  l.AddPadding(0, B({0, 3}, {4, 5}));
  ExpectError(ValidateLayout(l), {"'w'", "region [0:4, 5:6)"});
}

TEST(ValidateTest, ZeroAndNegativeStride) {
  Layout l = ColumnLayout();
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.strides[1] = 0; });
  ExpectError(ValidateLayout(l), {"'w'", "[4:8, 0:8)", "rank 1", "non-positive stride 0", "dim 1"});
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.strides[1] = 1; });
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.strides[0] = -8; });
  ExpectError(ValidateLayout(l), {"'w'", "rank 1", "non-positive stride -8", "dim 0"});
}

TEST(ValidateTest, UnknownRank) {
  Layout l = ColumnLayout();
  ValidateOptions o;
  o.known_ranks = std::set<int>{0, 2, 3};
  ExpectError(ValidateLayout(l, o), {"'w'", "rank 1", "not a known rank"});
  o.known_ranks = std::set<int>{0, 1};
  EXPECT_OK(ValidateLayout(l, o));
}

TEST(ValidateTest, FragmentOutsideItsBuffer) {
  Layout l = ColumnLayout();
  l.buffers.SetBytes(1, 60);
  ExpectError(ValidateLayout(l),
              {"'w'", "[4:8, 0:8)", "rank 1", "bytes [0, 64)", "outside buffer 'w' of 60 bytes"});
}

TEST(ValidateTest, FragmentOnAnotherRanksBuffer) {
  Layout l = ColumnLayout();
  l.fragments.Edit(1, [&](Fragment& frag) { frag.loc.buffer = 0; });
  ExpectError(ValidateLayout(l), {"'w'", "rank 1", "buffer 'w' of rank 0"});
}

TEST(ValidateTest, LargeLayoutIsFast) {
  // 400 tensors on a 16x16 mesh (102,400 fragments) plus one tensor split into 131,072 pieces.
  Layout l;
  for (int t = 0; t < 400; ++t) {
    EXPECT_OK(AddMeshSharded(l, {"t" + std::to_string(t), {256, 512}, DType::kBF16},
                             DeviceMesh::Iota({16, 16}), {Shard(0), Shard(1)}));
  }
  EXPECT_OK(AddMeshSharded(l, {"fine", {512, 256}, DType::kBF16}, DeviceMesh::Iota({512, 256}),
                           {Shard(0), Shard(1)}));
  ASSERT_EQ(l.fragments.size(), 102400u + 131072u);
  auto start = std::chrono::steady_clock::now();
  EXPECT_OK(ValidateLayout(l));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);  // quadratic work would take minutes; the bound allows a loaded machine
  std::cout << "validated " << l.fragments.size() << " fragments in " << seconds << " s\n";
  l.fragments.pop_back();
  ExpectError(ValidateLayout(l), {"'fine'", "region [511:512, 255:256)"});
}

}  // namespace
}  // namespace ferry
