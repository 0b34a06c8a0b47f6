// A host Quantize op through Executor::Run: with 1 copy thread (inline, as before the pool took
// quantization) and with 4 (ranges of blocks on the copy pool, CopyPool::StartQuantize), both
// scale formats, the fp8 values and scales equal the one-thread CPU reference
// (core/base/fp8_block.h) byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/core/runtime/quantize_plan_testutil.h"

namespace ferry {
namespace {

using ::ferry::testing::QuantizeRank;

TEST(ExecutorQuantizeTest, PoolThreadsGiveTheReferenceBytes) {
  for (Fp8ScaleFormat fmt : {Fp8ScaleFormat::kFloat32, Fp8ScaleFormat::kUe8m0}) {
    for (int threads : {1, 4}) {
      QuantizeRank rank(3, 1000, 700, fmt, threads);  // 8 x 6 blocks a matrix, partial edges
      Result<ExecutorStats> stats = rank.Run();
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      const int64_t n = 3 * 1000 * 700, blocks = Fp8BlockCount(3, 1000, 700);
      std::vector<unsigned char> want(static_cast<size_t>(n));
      std::vector<float> want_scales(static_cast<size_t>(blocks));
      Fp8BlockQuantizeMatrices(DType::kBF16, rank.source().data(), 3, 1000, 700, want.data(), want_scales.data(), fmt);
      EXPECT_EQ(rank.values(), want) << Fp8ScaleFormatName(fmt) << ", " << threads << " threads";
      EXPECT_EQ(std::memcmp(rank.scales().data(), want_scales.data(), static_cast<size_t>(blocks) * 4), 0)
          << Fp8ScaleFormatName(fmt) << ", " << threads << " threads";
      // Run again into the same buffers: the op's work is rebuilt per run.
      ASSERT_TRUE(rank.Run().ok());
      EXPECT_EQ(rank.values(), want);
    }
  }
}

}  // namespace
}  // namespace ferry
