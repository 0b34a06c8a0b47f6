// TransferPlan storage: ops' dep and copy ranges, and copy pairs packed and unpacked exactly
// (shared or separate shapes, dense or strided sides, 1 to 8 dims).
#include "core/plan/plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry {
namespace {

Region Strided(Space space, int buffer, int64_t offset, DType dtype,
               const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  Region r;
  r.space = space;
  r.buffer = buffer;
  r.offset = offset;
  r.dtype = dtype;
  r.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = shape[d];
    r.strides[d] = strides[d];
  }
  return r;
}

void ExpectSameRegion(const Region& a, const Region& b) {
  EXPECT_EQ(a.space, b.space);
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.ndim, b.ndim);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.strides, b.strides);
}

// A buffer table keeps (rank, bytes) per buffer and counts the ranks as buffers are added.
TEST(BufferTable, KeepsRanksAndSizesAndCountsRanks) {
  EXPECT_EQ(BufferTable().NumRanks(), 0);
  EXPECT_TRUE(BufferTable().empty());
  const BufferList specs = {{3, "a", 100}, {7, "b", 200}, {0, "c", 300}};
  BufferTable table(specs);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[1].rank, 7);
  EXPECT_EQ(table[1].bytes, 200);
  EXPECT_EQ(table.NumRanks(), 8);
  table.push_back({11, "d", 8});
  EXPECT_EQ(table.NumRanks(), 12);
  EXPECT_EQ(specs.size(), 3u);  // the list is untouched
  EXPECT_EQ(BufferTable({{2, "x", 1}}).NumRanks(), 3);
}

// A table made from a layout's buffer list keeps what it was made from when the list is edited
// afterwards.
TEST(BufferTable, KeepsItsEntriesWhenTheListChanges) {
  BufferList list = {{0, "a", 10}, {1, "b", 20}};
  BufferTable table(list);
  list.SetBytes(1, 99);
  list.push_back({5, "c", 30});
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1].bytes, 20);
  EXPECT_EQ(table.NumRanks(), 2);
  EXPECT_EQ(list.NumRanks(), 6);
}

TEST(TransferPlan, CopyPairsRoundTripThroughThePackedForm) {
  const std::vector<CopyPair> pairs = {
      // Strided source -> dense staging (a Pack): shape stored once, no staging strides.
      {Strided(Space::kSource, 3, 4096, DType::kBF16, {4, 6}, {100, 1}),
       Strided(Space::kStaging, 0, 64, DType::kBF16, {4, 6}, {6, 1})},
      // Dense staging -> strided destination (an Unpack), 3 dims with an empty extent.
      {Strided(Space::kStaging, 1, 0, DType::kFP32, {2, 0, 5}, {5, 5, 1}),
       Strided(Space::kDestination, 7, 8, DType::kFP32, {2, 0, 5}, {50, 10, 1})},
      // Both strided, a dtype change (Convert), 8 dims.
      {Strided(Space::kSource, 0, 0, DType::kFP32, {1, 2, 1, 2, 1, 2, 1, 3},
               {96, 48, 48, 24, 24, 12, 12, 4}),
       Strided(Space::kDestination, 2, 16, DType::kBF16, {1, 2, 1, 2, 1, 2, 1, 3},
               {24, 12, 12, 6, 6, 3, 3, 1})},
      // Different shapes of equal element count: both shapes kept.
      {Region::Bytes(Space::kStaging, 4, 0, 24),
       Strided(Space::kDestination, 1, 0, DType::kUInt8, {4, 6}, {16, 2})},
  };
  TransferPlan plan;
  Op op;
  op.kind = OpKind::kUnpack;
  const int id = plan.AddOp(op, {}, pairs);
  ASSERT_EQ(plan.ops[id].NumCopies(), static_cast<int>(pairs.size()));
  int i = 0;
  for (const CopyPair& c : plan.Copies(plan.ops[id])) {
    ExpectSameRegion(c.from, pairs[i].from);
    ExpectSameRegion(c.to, pairs[i].to);
    ++i;
  }
  EXPECT_EQ(i, static_cast<int>(pairs.size()));
  // The dense staging side of the first pair and the shared shapes are not stored: a header,
  // 2 (shape) and 2 (source strides) values.
  EXPECT_EQ(plan.copies[1].geometry - plan.copies[0].geometry, 5);
}

// A pair's element function (vLLM's Mamba -exp) is part of its geometry: it round-trips, and a
// pair of the same regions without one keeps a header of its own, as pairs had before.
TEST(TransferPlan, ElementFunctionsRoundTripAndKeepAGeometryOfTheirOwn) {
  const Region from = Strided(Space::kStaging, 0, 0, DType::kBF16, {8}, {1});
  const Region to = Strided(Space::kDestination, 1, 32, DType::kFP32, {8}, {1});
  TransferPlan plan;
  Op op;
  op.kind = OpKind::kConvert;
  const int id = plan.AddOp(op, {}, {{from, to, ElementFn::kNegExp}, {from, to}});
  const CopyPair neg_exp = plan.Copy(plan.ops[id].copies_begin);
  const CopyPair plain = plan.Copy(plan.ops[id].copies_begin + 1);
  EXPECT_EQ(neg_exp.fn, ElementFn::kNegExp);
  EXPECT_EQ(plain.fn, ElementFn::kNone);
  ExpectSameRegion(neg_exp.from, from);
  ExpectSameRegion(neg_exp.to, to);
  EXPECT_NE(plan.copies[0].geometry, plan.copies[1].geometry);
  EXPECT_EQ(plan.GeometryOf(0).fn, ElementFn::kNegExp);
  EXPECT_EQ(static_cast<uint64_t>(plan.copy_dims[static_cast<size_t>(plan.copies[1].geometry)]) >> 56, 0u);
}

TEST(TransferPlan, PairsOfOneGeometryShareItsRecord) {
  TransferPlan plan;
  // Eight rows of a strided source, each packed into its own place in a slot: one geometry.
  for (int row = 0; row < 8; ++row) {
    plan.AppendCopy(Strided(Space::kSource, 2, row * 800, DType::kBF16, {4, 6}, {100, 1}),
                    Strided(Space::kStaging, 1, row * 48, DType::kBF16, {4, 6}, {6, 1}));
  }
  // A different dtype, space or stride is a different geometry.
  plan.AppendCopy(Strided(Space::kSource, 2, 0, DType::kFP16, {4, 6}, {100, 1}),
                  Strided(Space::kStaging, 1, 0, DType::kFP16, {4, 6}, {6, 1}));
  plan.AppendCopy(Strided(Space::kSource, 2, 0, DType::kBF16, {4, 6}, {100, 1}),
                  Strided(Space::kDestination, 1, 0, DType::kBF16, {4, 6}, {6, 1}));
  plan.AppendCopy(Strided(Space::kSource, 2, 0, DType::kBF16, {4, 6}, {200, 1}),
                  Strided(Space::kStaging, 1, 0, DType::kBF16, {4, 6}, {6, 1}));
  ASSERT_EQ(plan.copies.size(), 11u);
  for (int row = 1; row < 8; ++row) EXPECT_EQ(plan.copies[row].geometry, plan.copies[0].geometry);
  EXPECT_EQ(plan.copy_dims.size(), 4u * 5u);  // four records of a header, a shape and strides
  for (int i = 8; i < 11; ++i) EXPECT_NE(plan.copies[i].geometry, plan.copies[0].geometry);
  for (int row = 0; row < 8; ++row) {
    const CopyPair c = plan.Copy(row);
    EXPECT_EQ(c.from.offset, row * 800);
    EXPECT_EQ(c.to.offset, row * 48);
    EXPECT_EQ(c.from.strides[0], 100);
  }
  EXPECT_EQ(plan.GeometryOf(8).from_dtype, DType::kFP16);
  EXPECT_EQ(plan.GeometryOf(9).to_space, Space::kDestination);
  EXPECT_EQ(plan.Copy(10).from.strides[0], 200);
  // A record edited in place is no longer shared: the next equal pair gets a record of its own.
  plan.copy_dims[static_cast<size_t>(plan.copies[0].geometry) + 3] = 7;
  plan.AppendCopy(Strided(Space::kSource, 2, 0, DType::kBF16, {4, 6}, {100, 1}),
                  Strided(Space::kStaging, 1, 0, DType::kBF16, {4, 6}, {6, 1}));
  EXPECT_NE(plan.copies.back().geometry, plan.copies[0].geometry);
  EXPECT_EQ(plan.Copy(11).from.strides[0], 100);
}

TEST(TransferPlan, FastPathPacksTheSamePairs) {
  TransferPlan plan;
  const int64_t shape[2] = {4, 6};
  const int64_t strides[2] = {100, 1};
  CopyEnd from, to;
  from.space = Space::kSource;
  from.buffer = 3;
  from.offset = 4096;
  from.dtype = DType::kBF16;
  from.strides = strides;
  to.space = Space::kStaging;
  to.offset = 64;
  to.dtype = DType::kBF16;
  plan.AppendCopy(from, to, 2, shape);
  const CopyPair c = plan.Copy(0);
  ExpectSameRegion(c.from, Strided(Space::kSource, 3, 4096, DType::kBF16, {4, 6}, {100, 1}));
  ExpectSameRegion(c.to, Strided(Space::kStaging, 0, 64, DType::kBF16, {4, 6}, {6, 1}));
}

TEST(TransferPlan, DepsAndCopiesAreRangesOfThePlanLists) {
  TransferPlan plan;
  Op op;
  const int a = plan.AddOp(op);
  const int b = plan.AddOp(op, {a});
  const int c = plan.AddOp(op, {a, b},
                           {{Region::Bytes(Space::kSource, 0, 0, 8),
                             Region::Bytes(Space::kDestination, 0, 0, 8)}});
  EXPECT_EQ(plan.ops[a].NumDeps(), 0);
  ASSERT_EQ(plan.Deps(plan.ops[c]).size(), 2u);
  EXPECT_EQ(plan.Deps(plan.ops[c])[1], b);
  EXPECT_EQ(plan.Copies(plan.ops[c]).size(), 1);
  plan.SetDeps(b, {});
  EXPECT_EQ(plan.ops[b].NumDeps(), 0);
  EXPECT_EQ(plan.Deps(plan.ops[c])[0], a);  // other ops' ranges are untouched
}

}  // namespace
}  // namespace ferry
