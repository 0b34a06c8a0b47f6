// Quantize ops on CUDA memory through Executor::Run: twelve ops (one matrix stack each, partial
// edge blocks, both scale formats) that are ready together run as one GPU submission, and their
// fp8 values and scales equal the CPU reference (core/base/fp8_block.h) byte for byte, run after
// run. Needs a GPU: where there is none it reports itself SKIPPED.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "tests/core/runtime/quantize_plan_testutil.h"

namespace ferry {
namespace {

using ::ferry::testing::QuantizeRank;

TEST(ExecutorQuantizeCudaTest, OpsReadyTogetherAreOneSubmissionWithTheReferenceBytes) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  constexpr int kOps = 12;
  constexpr int64_t kMatrices = 24, kRows = 300, kCols = 272;  // 3 x 3 blocks a matrix, partial edges
  for (Fp8ScaleFormat fmt : {Fp8ScaleFormat::kFloat32, Fp8ScaleFormat::kUe8m0}) {
    QuantizeRank rank(kMatrices, kRows, kCols, fmt, 1, kOps, MemoryKind::kCuda);
    const int64_t n = kMatrices * kRows * kCols, blocks = Fp8BlockCount(kMatrices, kRows, kCols);
    std::vector<unsigned char> want(static_cast<size_t>(n));
    std::vector<float> want_scales(static_cast<size_t>(blocks));
    Fp8BlockQuantizeMatrices(DType::kBF16, rank.source().data(), kMatrices, kRows, kCols, want.data(),
                             want_scales.data(), fmt);
    for (int run = 0; run < 2; ++run) {
      Result<ExecutorStats> stats = rank.Run();
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_EQ(stats->gpu_batches, 1) << Fp8ScaleFormatName(fmt) << ": " << kOps << " Quantize ops ready at once";
      EXPECT_EQ(rank.values(), want) << Fp8ScaleFormatName(fmt) << ", run " << run;
      EXPECT_EQ(std::memcmp(rank.scales().data(), want_scales.data(), static_cast<size_t>(blocks) * 4), 0)
          << Fp8ScaleFormatName(fmt) << ", run " << run;
    }
  }
}

}  // namespace
}  // namespace ferry
