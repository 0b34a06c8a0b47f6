// SplitQuantizingRead and UnquantizedBlockRows on hand-made plans: a bf16 twin read by a Quantize
// op, and direct-read copies into it. Each case's bands and pieces are worked by hand from the
// rows the copy covers (128-row bands, 32-byte rows of 16 bf16 columns).
#include "core/runtime/quantizing_read.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

constexpr int64_t kCols = 16, kRowBytes = kCols * 2;

// A plan whose rank 1 quantizes a bf16 stack [matrices, rows, 16] held in staging slot 0.
TransferPlan TwinPlan(int64_t matrices, int64_t rows) {
  TransferPlan plan;
  plan.num_ranks = 2;
  const int64_t bytes = matrices * rows * kRowBytes;
  plan.source_buffers = {{0, "w", 1 << 20}};
  plan.destination_buffers = {{1, "w_fp8", bytes / 2}, {1, "w_scale", 64}};
  const int twin = plan.AddSlot(1, bytes);
  Region values = Region::Bytes(Space::kStaging, twin, 0, bytes);
  values.dtype = DType::kBF16;
  values.ndim = 3;
  values.shape = {matrices, rows, kCols};
  values.strides = {rows * kCols, kCols, 1};
  Region fp8 = values;
  fp8.space = Space::kDestination;
  fp8.buffer = 0;
  fp8.dtype = DType::kFP8E4M3;
  Op quantize{.kind = OpKind::kQuantize, .rank = 1, .bytes = bytes / 2};
  quantize.data = {Space::kDestination, 1, 0};
  plan.AddOp(quantize, {}, {{values, fp8}});
  return plan;
}

// Twin bytes [begin, end) from source bytes at `from` onwards, as one contiguous byte copy (a Recv
// landing in the twin).
CopyPair ByteCopy(int64_t from, int64_t begin, int64_t end) {
  return {Region::Bytes(Space::kSource, 0, from, end - begin), Region::Bytes(Space::kStaging, 0, begin, end - begin)};
}

QuantizingSplit Split(const TransferPlan& plan, const std::vector<CopyPair>& copies) {
  std::vector<CopyGeometry> geometries;
  for (const CopyPair& c : copies) geometries.push_back(*MakeCopyGeometry(c.from, c.to));
  return SplitQuantizingRead(plan, copies, geometries, QuantizeOfSlot(plan, 1));
}

TEST(QuantizingReadTest, QuantizeOfSlotFindsTheTwinsQuantizeOnItsRankOnly) {
  const TransferPlan plan = TwinPlan(1, 300);
  EXPECT_EQ(QuantizeOfSlot(plan, 1), std::vector<int>{0});
  EXPECT_EQ(QuantizeOfSlot(plan, 0), std::vector<int>{-1});
}

// Rows [10, 290) of a 300-row matrix: only block row 1 (rows 128-255) lies whole inside; rows
// 10-127 and 256-289 stay copies into the twin.
TEST(QuantizingReadTest, AContiguousCopyQuantizesTheBandsWhollyInside) {
  const TransferPlan plan = TwinPlan(1, 300);
  const QuantizingSplit split = Split(plan, {ByteCopy(1000, 10 * kRowBytes, 290 * kRowBytes)});
  ASSERT_EQ(split.bands.size(), 1u);
  const QuantizingSplit::Band& band = split.bands[0];
  EXPECT_EQ(band.copy, 0);
  EXPECT_EQ(band.quantize, 0);
  EXPECT_EQ(band.from_delta, (128 - 10) * kRowBytes);
  EXPECT_EQ(band.pitch, kRowBytes);
  EXPECT_EQ(band.rows.matrix, 0);
  EXPECT_EQ(band.rows.block_row, 1);
  EXPECT_EQ(band.rows.block_rows, 1);
  EXPECT_EQ(split.band_bytes, 128 * kRowBytes);
  ASSERT_EQ(split.pieces.size(), 2u);
  EXPECT_EQ(split.pieces[0].from_delta, 0);
  EXPECT_EQ(split.pieces[0].to_delta, 0);
  EXPECT_EQ(split.geometries[0].run, (128 - 10) * kRowBytes);
  EXPECT_EQ(split.pieces[1].from_delta, (256 - 10) * kRowBytes);
  EXPECT_EQ(split.pieces[1].to_delta, (256 - 10) * kRowBytes);
  EXPECT_EQ(split.geometries[1].run, (290 - 256) * kRowBytes);
}

// A copy to the matrix's end quantizes its partial last block row (rows 256-299); one starting
// mid-row begins its bands at the next whole row's band.
TEST(QuantizingReadTest, TheMatrixEndClosesAPartialLastBand) {
  const TransferPlan plan = TwinPlan(1, 300);
  const QuantizingSplit tail = Split(plan, {ByteCopy(0, 200 * kRowBytes, 300 * kRowBytes)});
  ASSERT_EQ(tail.bands.size(), 1u);
  EXPECT_EQ(tail.bands[0].rows.block_row, 2);
  EXPECT_EQ(tail.bands[0].from_delta, (256 - 200) * kRowBytes);
  EXPECT_EQ(tail.band_bytes, 44 * kRowBytes);
  ASSERT_EQ(tail.pieces.size(), 1u);
  EXPECT_EQ(tail.geometries[0].run, 56 * kRowBytes);

  const QuantizingSplit mid_row = Split(plan, {ByteCopy(0, 8, 300 * kRowBytes)});
  ASSERT_EQ(mid_row.bands.size(), 1u) << "row 0 is not whole: block rows 1-2 only";
  EXPECT_EQ(mid_row.bands[0].rows.block_row, 1);
  EXPECT_EQ(mid_row.bands[0].rows.block_rows, 2);
  EXPECT_EQ(mid_row.bands[0].from_delta, 128 * kRowBytes - 8);
}

// A source whose rows are strided (a column slice of a wider tensor): band rows a source row
// apart, pieces whole rows.
TEST(QuantizingReadTest, StridedSourceRowsKeepTheirPitch) {
  const TransferPlan plan = TwinPlan(1, 300);
  Region from = Region::Bytes(Space::kSource, 0, 64, 0);
  from.dtype = DType::kBF16;
  from.ndim = 2;
  from.shape = {160, kCols};
  from.strides = {40, 1};
  Region to = from;
  to.space = Space::kStaging;
  to.buffer = 0;
  to.offset = 100 * kRowBytes;  // twin rows [100, 260)
  to.strides = {kCols, 1};
  const QuantizingSplit split = Split(plan, {{from, to}});
  ASSERT_EQ(split.bands.size(), 1u);
  EXPECT_EQ(split.bands[0].rows.block_row, 1);
  EXPECT_EQ(split.bands[0].pitch, 80);
  EXPECT_EQ(split.bands[0].from_delta, 28 * 80) << "twin row 128 is the copy's row 28";
  ASSERT_EQ(split.pieces.size(), 2u);
  EXPECT_EQ(split.geometries[0].rows, 28);
  EXPECT_EQ(split.pieces[1].from_delta, 156 * 80);
  EXPECT_EQ(split.pieces[1].to_delta, 156 * kRowBytes);
  EXPECT_EQ(split.geometries[1].rows, 4);
}

// One copy across a stack's two matrices: a band in each; nothing left to copy.
TEST(QuantizingReadTest, ACopyAcrossMatricesBandsEach) {
  const TransferPlan plan = TwinPlan(2, 128);
  const QuantizingSplit split = Split(plan, {ByteCopy(0, 0, 2 * 128 * kRowBytes)});
  ASSERT_EQ(split.bands.size(), 2u);
  EXPECT_EQ(split.bands[1].rows.matrix, 1);
  EXPECT_EQ(split.bands[1].from_delta, 128 * kRowBytes);
  EXPECT_TRUE(split.pieces.empty());
}

// Copies that convert, land outside a twin, or cover no whole band: no bands, so the read is
// not a quantizing one.
TEST(QuantizingReadTest, CopiesWithoutAWholeBandLeaveTheReadAsItWas) {
  const TransferPlan plan = TwinPlan(1, 300);
  EXPECT_FALSE(Split(plan, {ByteCopy(0, 0, 100 * kRowBytes)}).quantizes());
  Region from = Region::Bytes(Space::kSource, 0, 0, 0);
  from.dtype = DType::kFP32;
  from.ndim = 2;
  from.shape = {128, kCols};
  from.strides = {kCols, 1};
  Region to = from;
  to.space = Space::kStaging;
  to.buffer = 0;
  to.dtype = DType::kBF16;
  EXPECT_FALSE(Split(plan, {{from, to}}).quantizes()) << "a converting copy";
  EXPECT_FALSE(Split(plan, {{Region::Bytes(Space::kSource, 0, 0, 4096),
                             Region::Bytes(Space::kDestination, 0, 0, 4096)}})
                   .quantizes())
      << "a copy into a destination buffer";
  // A read with one banded copy keeps its other copies whole, as pieces.
  const QuantizingSplit mixed = Split(plan, {{from, to}, ByteCopy(0, 128 * kRowBytes, 256 * kRowBytes)});
  ASSERT_EQ(mixed.bands.size(), 1u);
  ASSERT_EQ(mixed.pieces.size(), 1u);
  EXPECT_EQ(mixed.pieces[0].copy, 0);
  EXPECT_EQ(mixed.geometries[0].from_dtype, DType::kFP32);
}

TEST(QuantizingReadTest, UnquantizedBlockRowsAreTheRestByMatrix) {
  const QuantizeShape shape{2, 300, kCols};  // 3 block rows a matrix
  const std::vector<BlockRows> left = UnquantizedBlockRows(shape, {{1, 0, 3}, {0, 1, 1}});
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].matrix, 0);
  EXPECT_EQ(left[0].block_row, 0);
  EXPECT_EQ(left[0].block_rows, 1);
  EXPECT_EQ(left[1].matrix, 0);
  EXPECT_EQ(left[1].block_row, 2);
  EXPECT_EQ(left[1].block_rows, 1);
  EXPECT_TRUE(UnquantizedBlockRows(shape, {{0, 0, 3}, {1, 0, 2}, {1, 2, 1}}).empty());
  const std::vector<BlockRows> all = UnquantizedBlockRows(shape, {});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].block_rows, 3);
}

}  // namespace
}  // namespace ferry
