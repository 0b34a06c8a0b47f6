// GPU benchmark of the block-quantize kernel (core/cuda/block_quantize.h) on shapes a refit into
// vLLM's block-scaled fp8 produces, against cudaMemcpyAsync D2D: 1 GiB of bf16 as 16 [4096, 8192]
// weights in one job, the same starting one byte past an aligned address (the byte walk: a staging
// slot may start at any byte), [14000, 8192] and [8192, 14000] weights (partial edge blocks), and
// 4096 small jobs in one launch. Bandwidth counts bytes read (bf16) plus bytes written (fp8 and
// scales), as a plain D2D copy is quoted (read + write).
// Run: bazel-bin/tests/core/cuda/block_quantize_bench (needs a GPU; exits 0 with a note otherwise).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "core/base/fp8_block.h"
#include "core/cuda/block_quantize.h"
#include "tests/core/cuda/bench_device.h"
#include "tests/core/cuda/stream_timing.h"

namespace ferry::cuda {
namespace {

constexpr int64_t kSrcBytes = int64_t{1} << 30;

struct Case {
  std::string name;
  std::vector<BlockQuantizeJob> jobs;
};

// `count` jobs of `matrices` bf16 [rows, cols] each, packed from `src + skew`, into `dst` and
// `scales` (fp32 scales, 4-byte aligned).
Case Jobs(std::string name, unsigned char* src, unsigned char* dst, unsigned char* scales, int64_t skew,
          int64_t count, int64_t matrices, int64_t rows, int64_t cols) {
  Case c{std::move(name), {}};
  const int64_t elements = matrices * rows * cols;
  const int64_t scale_bytes = Fp8BlockCount(matrices, rows, cols) * 4;
  for (int64_t j = 0; j < count; ++j) {
    BlockQuantizeJob job;
    job.src = src + skew + j * elements * 2;
    job.dst = dst + skew + j * elements;
    job.scales = scales + j * scale_bytes;
    job.matrices = matrices;
    job.rows = rows;
    job.cols = cols;
    c.jobs.push_back(job);
  }
  return c;
}

int64_t BytesMoved(const Case& c) {
  int64_t bytes = 0;
  for (const BlockQuantizeJob& j : c.jobs) {
    const int64_t elements = j.matrices * j.rows * j.cols;
    bytes += elements * 3 + Fp8BlockCount(j.matrices, j.rows, j.cols) * 4;
  }
  return bytes;
}

int Main() {
  if (!FoundDevice("block_quantize_bench")) return 0;
  auto src = DeviceAlloc(kSrcBytes + 256);
  auto dst = DeviceAlloc(kSrcBytes / 2 + 256);
  auto scales = DeviceAlloc(kSrcBytes / 1024);
  if (!src.ok() || !dst.ok() || !scales.ok()) return 1;
  auto* s = static_cast<unsigned char*>(*src);
  auto* d = static_cast<unsigned char*>(*dst);
  auto* sc = static_cast<unsigned char*>(*scales);
  const std::vector<uint16_t> values = VariedBf16(static_cast<size_t>(kSrcBytes / 2 + 128));
  if (!CopyToDevice(s, values.data(), static_cast<int64_t>(values.size() * 2)).ok()) return 1;

  const double memcpy_s = TimeSeconds([&] { return CopyDeviceToDeviceAsync(d, s, kSrcBytes / 2, nullptr); }, 20);
  const double memcpy_gbps = 2.0 * (kSrcBytes / 2) / memcpy_s / 1e9;
  std::vector<Case> cases;
  cases.push_back(Jobs("16 x [4096, 8192] bf16, one job", s, d, sc, 0, 1, 16, 4096, 8192));
  cases.push_back(Jobs("the same, source 1 byte past aligned", s, d, sc, 1, 1, 16, 4096, 8192));
  cases.push_back(Jobs("4 x [14000, 8192] bf16 (rows % 128 != 0)", s, d, sc, 0, 4, 1, 14000, 8192));
  cases.push_back(Jobs("4 x [8192, 14000] bf16 (cols % 128 != 0)", s, d, sc, 0, 4, 1, 8192, 14000));
  cases.push_back(Jobs("4096 jobs of [256, 512] bf16", s, d, sc, 0, 4096, 1, 256, 512));

  std::printf("%-44s %9s %8s %7s\n", "case", "ms", "GB/s", "vs cpy");
  std::printf("%-44s %9.3f %8.1f %7.2f\n", "cudaMemcpyAsync D2D 512 MiB", memcpy_s * 1e3, memcpy_gbps, 1.0);
  for (const Case& c : cases) {
    const double t = TimeSeconds([&] { return LaunchBlockQuantize(c.jobs, nullptr); }, 20);
    if (t < 0) return 1;
    const double gbps = BytesMoved(c) / t / 1e9;
    std::printf("%-44s %9.3f %8.1f %7.2f\n", c.name.c_str(), t * 1e3, gbps, gbps / memcpy_gbps);
  }
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  (void)DeviceFree(*scales);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main() { return ferry::cuda::Main(); }
