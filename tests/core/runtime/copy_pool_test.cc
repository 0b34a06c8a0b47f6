// CopyPool: small copies run inline, large ones as tasks on the workers, reported once per op;
// a Quantize op's blocks likewise, split into block ranges whose bytes equal the one-thread
// reference (core/base/fp8_block.h).
#include "core/runtime/copy_pool.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ferry {
namespace {

// A dense uint8 copy of `bytes` bytes.
CopyGeometry Dense(int64_t bytes) {
  Region r;
  r.dtype = DType::kUInt8;
  r.ndim = 1;
  r.shape = {bytes};
  r.strides = {1};
  return MakeCopyGeometry(r, r).value();
}

// Runs queued tasks on this thread too, then waits (up to 10 s) for the pool to report an op.
std::vector<std::pair<int, Status>> RunAndAwaitReport(CopyPool& pool) {
  while (pool.RunOne()) {
  }
  std::vector<std::pair<int, Status>> reported;
  for (int tries = 0; tries < 1000 && reported.empty(); ++tries) {
    reported = pool.Done(std::chrono::microseconds(10000));
  }
  return reported;
}

TEST(CopyPoolTest, SmallCopiesRunInline) {
  CopyPool pool(2);
  std::vector<char> from(1000, 7), to(1000, 0);
  std::vector<CopyGeometry> geometries = {Dense(1000)};
  std::vector<CopyEnds> ends = {{from.data(), to.data(), 0}};
  std::vector<CopyItem> items;
  auto done = pool.Start(/*op=*/3, geometries, ends, 1000, items);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  EXPECT_EQ(to, from);
}

TEST(CopyPoolTest, LargeCopiesRunOnTheWorkersAndAreReportedOnce) {
  CopyPool pool(2);
  const int64_t bytes = 8 << 20;
  std::vector<char> from(bytes), to(bytes, 0);
  for (int64_t i = 0; i < bytes; ++i) from[i] = static_cast<char>(i * 31);
  std::vector<CopyGeometry> geometries = {Dense(bytes)};
  std::vector<CopyEnds> ends = {{from.data(), to.data(), 0}};
  std::vector<CopyItem> items;
  auto done = pool.Start(/*op=*/5, geometries, ends, bytes, items);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_FALSE(*done);
  const std::vector<std::pair<int, Status>> reported = RunAndAwaitReport(pool);
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].first, 5);
  EXPECT_TRUE(reported[0].second.ok()) << reported[0].second.ToString();
  EXPECT_EQ(to, from);
  pool.Drain();
  EXPECT_TRUE(pool.Done(std::chrono::microseconds(0)).empty());
}

// [matrices, rows, cols] bf16 of per-block magnitudes, a zero block and a NaN block.
std::vector<unsigned char> Bf16Matrices(int64_t matrices, int64_t rows, int64_t cols) {
  std::mt19937 rng(7);
  std::vector<unsigned char> v(static_cast<size_t>(matrices * rows * cols * 2));
  for (int64_t i = 0; i < matrices * rows * cols; ++i) {
    const int64_t r = i / cols % rows, c = i % cols;
    const int e = static_cast<int>((r / 128 * 5 + c / 128 * 3) % 40) - 20;
    StoreFromFloat(DType::kBF16, v.data() + i * 2, std::ldexp(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f, e));
  }
  for (int64_t c = 0; c < 128; ++c) StoreFromFloat(DType::kBF16, v.data() + c * 2, 0.0f);
  StoreFromFloat(DType::kBF16, v.data() + (5 * cols + 200) * 2, NAN);
  return v;
}

// A stack of matrices quantized by 3 workers and the caller, with every scale format: more than
// one block range, each on whatever thread takes it, reported once, equal to the reference.
TEST(CopyPoolTest, QuantizeBlocksRunOnTheWorkersAndEqualTheReference) {
  const int64_t matrices = 2, rows = 700, cols = 600;  // 6 x 5 blocks each, partial at the edges
  const std::vector<unsigned char> src = Bf16Matrices(matrices, rows, cols);
  const int64_t n = matrices * rows * cols, blocks = Fp8BlockCount(matrices, rows, cols);
  for (Fp8ScaleFormat fmt : {Fp8ScaleFormat::kFloat32, Fp8ScaleFormat::kUe8m0, Fp8ScaleFormat::kUe8m0Packed}) {
    std::vector<unsigned char> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0xaa);
    const size_t scale_bytes = static_cast<size_t>(matrices * Fp8ScaleMatrixBytes(fmt, rows, cols));
    std::vector<unsigned char> want_scales(scale_bytes), got_scales(scale_bytes, 0xaa);
    Fp8BlockQuantizeMatrices(DType::kBF16, src.data(), matrices, rows, cols, want.data(), want_scales.data(), fmt);
    CopyPool pool(3);
    const QuantizeWork work{DType::kBF16, src.data(), matrices, rows, cols, got.data(), got_scales.data(), fmt};
    std::vector<CopyItem> items;
    ASSERT_FALSE(pool.StartQuantize(/*op=*/9, work, items));
    ASSERT_EQ(items.size(), 16u);  // (3 workers + the caller) * 4 ranges of whole blocks
    int64_t covered = 0;
    for (const CopyItem& item : items) {
      EXPECT_EQ(item.slice.row_begin, covered);
      covered = item.slice.row_end;
    }
    EXPECT_EQ(covered, blocks);
    const std::vector<std::pair<int, Status>> reported = RunAndAwaitReport(pool);
    ASSERT_EQ(reported.size(), 1u);
    EXPECT_EQ(reported[0].first, 9);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got_scales, want_scales) << Fp8ScaleFormatName(fmt);
  }
}

TEST(CopyPoolTest, OneBlockOrNoWorkersQuantizeInline) {
  const std::vector<unsigned char> src = Bf16Matrices(1, 300, 300);
  std::vector<unsigned char> want(90000), got(90000);
  std::vector<unsigned char> want_scales(9 * 4), got_scales(9 * 4);
  Fp8BlockQuantizeMatrices(DType::kBF16, src.data(), 1, 300, 300, want.data(), want_scales.data());
  CopyPool none(0);
  std::vector<CopyItem> items;
  EXPECT_TRUE(none.StartQuantize(1, {DType::kBF16, src.data(), 1, 300, 300, got.data(), got_scales.data()}, items));
  EXPECT_EQ(got, want);
  CopyPool pool(2);
  std::vector<unsigned char> one(100 * 100);
  std::vector<unsigned char> one_scale(4);
  EXPECT_TRUE(pool.StartQuantize(2, {DType::kBF16, src.data(), 1, 100, 100, one.data(), one_scale.data()}, items));
  EXPECT_TRUE(pool.Done(std::chrono::microseconds(0)).empty());
}

}  // namespace
}  // namespace ferry
