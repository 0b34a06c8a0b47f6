// GPU benchmark of the batched convert kernel (core/cuda/batched_convert.h) on conversions a refit
// between dtypes produces, against cudaMemcpyAsync D2D: a [32768, 8192] matrix of bf16 into fp8
// e4m3 and e5m2, of fp32 into bf16 (fp32 master weights into a bf16 engine) and of bf16 into
// fp32; the e4m3 one again starting one byte past an aligned address (the byte walk: a staging
// slot may start at any byte); half the columns of bf16 rows (a TP shard) into dense fp8; and 4096
// small conversions in one launch. Each case's descriptors are uploaded once and
// launched every iteration, as the executor does (ConvertTable). Bandwidth counts bytes read plus
// bytes written, as a plain D2D copy is quoted (read + write).
// Run: bazel-bin/tests/core/cuda/batched_convert_bench (needs a GPU; exits 0 with a note otherwise).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/batched_convert.h"
#include "core/cuda/batched_copy.h"
#include "tests/core/cuda/bench_device.h"
#include "tests/core/cuda/stream_timing.h"

namespace ferry::cuda {
namespace {

constexpr int64_t kElements = int64_t{1} << 28;  // 512 MiB of bf16
constexpr int64_t kCols = 8192;

struct Case {
  std::string name;
  std::vector<StridedConvert> converts;
};

// `count` conversions of [rows, cols] elements `from` -> `to`, row-major and dense on both sides
// unless `src_pitch` (source elements from one row to the next) is wider, packed from `src + skew`
// and `dst + skew`.
Case Converts(std::string name, DType from, DType to, unsigned char* src, unsigned char* dst,
              int64_t skew, int64_t count, int64_t rows, int64_t cols, int64_t src_pitch) {
  Case c{std::move(name), {}};
  const int64_t fs = DTypeSize(from), ts = DTypeSize(to);
  for (int64_t j = 0; j < count; ++j) {
    StridedConvert k;
    k.src = src + skew + j * rows * src_pitch * fs;
    k.dst = dst + skew + j * rows * cols * ts;
    k.src_dtype = from;
    k.dst_dtype = to;
    k.ndim = 2;
    k.shape = {rows, cols};
    k.src_strides = {src_pitch * fs, fs};
    k.dst_strides = {cols * ts, ts};
    c.converts.push_back(k);
  }
  return c;
}

int64_t BytesMoved(const Case& c) {
  int64_t bytes = 0;
  for (const StridedConvert& k : c.converts) {
    bytes += k.shape[0] * k.shape[1] * (DTypeSize(k.src_dtype) + DTypeSize(k.dst_dtype));
  }
  return bytes;
}

int Main() {
  if (!FoundDevice("batched_convert_bench")) return 0;
  auto src = DeviceAlloc(kElements * 4 + 256);
  auto dst = DeviceAlloc(kElements * 4 + 256);
  if (!src.ok() || !dst.ok()) return 1;
  auto* s = static_cast<unsigned char*>(*src);
  auto* d = static_cast<unsigned char*>(*dst);
  const std::vector<uint16_t> values = VariedBf16(static_cast<size_t>(kElements * 2 + 128));
  if (!CopyToDevice(s, values.data(), static_cast<int64_t>(values.size() * 2)).ok()) return 1;

  const double memcpy_s = TimeSeconds([&] { return CopyDeviceToDeviceAsync(d, s, kElements * 2, nullptr); }, 20);
  const double memcpy_gbps = 2.0 * kElements * 2 / memcpy_s / 1e9;
  const int64_t rows = kElements / kCols;
  const DType bf16 = DType::kBF16, fp32 = DType::kFP32, e4m3 = DType::kFP8E4M3, e5m2 = DType::kFP8E5M2;
  std::vector<Case> cases;
  cases.push_back(Converts("bf16 -> fp8 e4m3 [32768, 8192]", bf16, e4m3, s, d, 0, 1, rows, kCols, kCols));
  cases.push_back(Converts("the same, source 1 byte past aligned", bf16, e4m3, s, d, 1, 1, rows, kCols, kCols));
  cases.push_back(Converts("bf16 -> fp8 e5m2 [32768, 8192]", bf16, e5m2, s, d, 0, 1, rows, kCols, kCols));
  cases.push_back(Converts("fp32 -> bf16 [32768, 8192]", fp32, bf16, s, d, 0, 1, rows, kCols, kCols));
  cases.push_back(Converts("bf16 -> fp32 [32768, 8192]", bf16, fp32, s, d, 0, 1, rows, kCols, kCols));
  cases.push_back(Converts("bf16 half columns -> fp8 e4m3", bf16, e4m3, s, d, 0, 1, rows, kCols / 2, kCols));
  cases.push_back(Converts("4096 x bf16 [256, 256] -> fp8 e4m3", bf16, e4m3, s, d, 0, 4096, 256, 256, 256));

  std::printf("%-40s %9s %8s %7s\n", "case", "ms", "GB/s", "vs cpy");
  std::printf("%-40s %9.3f %8.1f %7.2f\n", "cudaMemcpyAsync D2D 512 MiB", memcpy_s * 1e3, memcpy_gbps, 1.0);
  for (const Case& c : cases) {
    auto table = ConvertTable::Upload(c.converts, nullptr);
    if (!table.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), table.status().ToString().c_str());
      return 1;
    }
    const double t = TimeSeconds([&] { return (*table)->Launch(); }, 10);
    if (t < 0) return 1;
    const double gbps = BytesMoved(c) / t / 1e9;
    std::printf("%-40s %9.3f %8.1f %7.2f\n", c.name.c_str(), t * 1e3, gbps, gbps / memcpy_gbps);
  }
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main() { return ferry::cuda::Main(); }
