// SplitQuantizingRead and UnquantizedBlocks on hand-made plans: a bf16 twin read by a Quantize
// op, and direct-read copies into it. Each case's block rectangles and pieces are worked by hand
// from the rows and columns the copy covers (128x128 blocks; 32-byte rows of 16 bf16 columns, or
// 1024-byte rows of 512 for column slices).
#include "core/runtime/quantizing_read.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

constexpr int64_t kCols = 16, kRowBytes = kCols * 2;

// A plan whose rank 1 quantizes a bf16 stack [matrices, rows, cols] held in staging slot 0.
TransferPlan TwinPlan(int64_t matrices, int64_t rows, int64_t cols = kCols) {
  TransferPlan plan;
  plan.num_ranks = 2;
  const int64_t bytes = matrices * rows * cols * 2;
  plan.source_buffers = {{0, "w", 1 << 20}};
  plan.destination_buffers = {{1, "w_fp8", bytes / 2}, {1, "w_scale", 64}};
  const int twin = plan.AddSlot(1, bytes);
  Region values = Region::Bytes(Space::kStaging, twin, 0, bytes);
  values.dtype = DType::kBF16;
  values.ndim = 3;
  values.shape = {matrices, rows, cols};
  values.strides = {rows * cols, cols, 1};
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

// A twin [300, 512] of bf16 (1024-byte rows), for column slices.
TransferPlan WidePlan() { return TwinPlan(1, 300, 512); }

// `rows` rows of `cols` bf16 columns of the source, from row `first` of rows `pitch` elements apart.
Region SourceRows(int64_t first, int64_t rows, int64_t cols, int64_t pitch) {
  Region r = Region::Bytes(Space::kSource, 0, first * pitch * 2, 0);
  r.dtype = DType::kBF16;
  r.ndim = 2;
  r.shape = {rows, cols};
  r.strides = {pitch, 1};
  return r;
}

// Twin rows [first, first + rows), columns [col, col + cols) of WidePlan's matrix.
Region TwinRows(int64_t first, int64_t rows, int64_t col, int64_t cols) {
  Region r = Region::Bytes(Space::kStaging, 0, (first * 512 + col) * 2, 0);
  r.dtype = DType::kBF16;
  r.ndim = 2;
  r.shape = {rows, cols};
  r.strides = {512, 1};
  return r;
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
  ASSERT_EQ(split.rects.size(), 1u);
  const QuantizingSplit::Rect& band = split.rects[0];
  EXPECT_EQ(band.copy, 0);
  EXPECT_EQ(band.quantize, 0);
  EXPECT_EQ(band.from_delta, (128 - 10) * kRowBytes);
  EXPECT_EQ(band.pitch, kRowBytes);
  EXPECT_EQ(band.blocks.matrix, 0);
  EXPECT_EQ(band.blocks.block_row, 1);
  EXPECT_EQ(band.blocks.block_rows, 1);
  EXPECT_EQ(split.rect_bytes, 128 * kRowBytes);
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
  ASSERT_EQ(tail.rects.size(), 1u);
  EXPECT_EQ(tail.rects[0].blocks.block_row, 2);
  EXPECT_EQ(tail.rects[0].from_delta, (256 - 200) * kRowBytes);
  EXPECT_EQ(tail.rect_bytes, 44 * kRowBytes);
  ASSERT_EQ(tail.pieces.size(), 1u);
  EXPECT_EQ(tail.geometries[0].run, 56 * kRowBytes);

  const QuantizingSplit mid_row = Split(plan, {ByteCopy(0, 8, 300 * kRowBytes)});
  ASSERT_EQ(mid_row.rects.size(), 1u) << "row 0 is not whole: block rows 1-2 only";
  EXPECT_EQ(mid_row.rects[0].blocks.block_row, 1);
  EXPECT_EQ(mid_row.rects[0].blocks.block_rows, 2);
  EXPECT_EQ(mid_row.rects[0].from_delta, 128 * kRowBytes - 8);
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
  ASSERT_EQ(split.rects.size(), 1u);
  EXPECT_EQ(split.rects[0].blocks.block_row, 1);
  EXPECT_EQ(split.rects[0].pitch, 80);
  EXPECT_EQ(split.rects[0].from_delta, 28 * 80) << "twin row 128 is the copy's row 28";
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
  ASSERT_EQ(split.rects.size(), 2u);
  EXPECT_EQ(split.rects[1].blocks.matrix, 1);
  EXPECT_EQ(split.rects[1].from_delta, 128 * kRowBytes);
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
  ASSERT_EQ(mixed.rects.size(), 1u);
  ASSERT_EQ(mixed.pieces.size(), 1u);
  EXPECT_EQ(mixed.pieces[0].copy, 0);
  EXPECT_EQ(mixed.geometries[0].from_dtype, DType::kFP32);
}

// A column slice of a row-parallel weight (a trainer's TP shard gathered into a wider inference
// shard): rows of 256 columns landing in twin columns [256, 512) of a [300, 512] matrix. Its
// blocks are block columns 2-3 of every block row, the last block row partial.
TEST(QuantizingReadTest, AColumnSliceQuantizesItsWholeBlockColumns) {
  const TransferPlan plan = WidePlan();
  const QuantizingSplit split = Split(plan, {{SourceRows(0, 300, 256, 600), TwinRows(0, 300, 256, 256)}});
  ASSERT_EQ(split.rects.size(), 1u);
  EXPECT_EQ(split.rects[0].blocks.block_row, 0);
  EXPECT_EQ(split.rects[0].blocks.block_rows, 3);
  EXPECT_EQ(split.rects[0].blocks.block_col, 2);
  EXPECT_EQ(split.rects[0].blocks.block_cols, 2);
  EXPECT_EQ(split.rects[0].from_delta, 0);
  EXPECT_EQ(split.rects[0].pitch, 1200);
  EXPECT_EQ(split.rect_bytes, 300 * 256 * 2);
  EXPECT_TRUE(split.pieces.empty());
}

// Rows [10, 300) and columns [100, 400) of that matrix: whole blocks in rows 128-299 and columns
// 128-383; rows 10-127 stay a piece of the copy's width, and beside the blocks columns 100-127 and
// 384-399 of rows 128-299.
TEST(QuantizingReadTest, AColumnSliceLeavesItsEdgesToTheTwin) {
  const TransferPlan plan = WidePlan();
  const QuantizingSplit split = Split(plan, {{SourceRows(0, 290, 300, 600), TwinRows(10, 290, 100, 300)}});
  ASSERT_EQ(split.rects.size(), 1u);
  const BlockRect& b = split.rects[0].blocks;
  EXPECT_EQ(b.block_row, 1);
  EXPECT_EQ(b.block_rows, 2);
  EXPECT_EQ(b.block_col, 1);
  EXPECT_EQ(b.block_cols, 2);
  EXPECT_EQ(split.rects[0].from_delta, 118 * 1200 + 28 * 2);
  EXPECT_EQ(split.rect_bytes, 172 * 256 * 2);
  ASSERT_EQ(split.pieces.size(), 3u);
  EXPECT_EQ(split.geometries[0].rows, 118);
  EXPECT_EQ(split.geometries[0].run, 300);
  EXPECT_EQ(split.pieces[1].from_delta, 118 * 1200);
  EXPECT_EQ(split.pieces[1].to_delta, 118 * 1024);
  EXPECT_EQ(split.geometries[1].rows, 172);
  EXPECT_EQ(split.geometries[1].run, 28);
  EXPECT_EQ(split.pieces[2].from_delta, 118 * 1200 + 284 * 2);
  EXPECT_EQ(split.pieces[2].to_delta, 118 * 1024 + 284 * 2);
  EXPECT_EQ(split.geometries[2].run, 16);
}

TEST(QuantizingReadTest, UnquantizedBlocksAreTheRestMergedIntoRectangles) {
  const QuantizeShape shape{2, 300, 512};  // 3 block rows, 4 block columns a matrix
  const std::vector<BlockRect> left = UnquantizedBlocks(shape, {{0, 0, 3, 2, 2}, {1, 1, 1, 0, 4}});
  ASSERT_EQ(left.size(), 3u);
  auto expect = [](const BlockRect& b, int64_t m, int64_t r, int64_t rows, int64_t c, int64_t cols) {
    EXPECT_EQ(b.matrix, m);
    EXPECT_EQ(b.block_row, r);
    EXPECT_EQ(b.block_rows, rows);
    EXPECT_EQ(b.block_col, c);
    EXPECT_EQ(b.block_cols, cols);
  };
  expect(left[0], 0, 0, 3, 0, 2);  // columns 0-1 of every row, merged
  expect(left[1], 1, 0, 1, 0, 4);
  expect(left[2], 1, 2, 1, 0, 4);  // not next to row 0's: a rectangle of its own
  EXPECT_TRUE(UnquantizedBlocks(shape, {{0, 0, 3, 0, 4}, {1, 0, 3, 0, 4}}).empty());
  const std::vector<BlockRect> all = UnquantizedBlocks(shape, {});
  ASSERT_EQ(all.size(), 2u);
  expect(all[1], 1, 0, 3, 0, 4);
  EXPECT_EQ(ElementsOf({0, 2, 1, 3, 1}, shape), 44 * 128) << "the last block row holds 44 rows";
  EXPECT_EQ(ElementsOf(all[1], shape), 300 * 512);
}

}  // namespace
}  // namespace ferry
