// GPU benchmark of the batched strided-copy kernel against cudaMemcpyAsync device-to-device, on
// shapes a refit produces: one dense region, thousands of small fragments, column shards of
// row-major matrices (row-parallel TP), and 2-byte elements at stride 2 (interleaved halves); and
// against a copy call per fragment (cudaMemcpyAsync, or cudaMemcpy2DAsync for strided ones).
// Bandwidth counts bytes read + bytes written, as a plain D2D copy is usually quoted.
// Run: bazel-bin/tests/core/cuda/batched_copy_bench (needs a GPU; exits 0 with a note otherwise).
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "tests/core/cuda/bench_device.h"
#include "tests/core/cuda/stream_timing.h"

namespace ferry::cuda {
namespace {

constexpr int64_t kBytes = int64_t{1} << 30;

int Main() {
  if (!FoundDevice("batched_copy_bench")) return 0;
  auto src = DeviceAlloc(kBytes);
  auto dst = DeviceAlloc(kBytes);
  if (!src.ok() || !dst.ok()) return 1;
  auto* s = static_cast<unsigned char*>(*src);
  auto* d = static_cast<unsigned char*>(*dst);

  const double memcpy_s =
      TimeSeconds([&] { return CopyDeviceToDeviceAsync(d, s, kBytes, nullptr); }, 20);
  struct Case {
    std::string name;
    std::vector<StridedCopy> copies;
    int64_t bytes;
    // What a copy per fragment costs: cudaMemcpyAsync per contiguous fragment, cudaMemcpy2DAsync
    // per strided one (the reference implementation's way); none for element-wise strides.
    std::function<Status()> per_fragment;
  };
  std::vector<Case> cases;
  auto contiguous = [&](const std::string& name, int64_t piece) {
    std::vector<StridedCopy> many;
    for (int64_t off = 0; off < kBytes; off += piece) {
      StridedCopy c;
      c.src = s + off; c.dst = d + (kBytes - piece - off); c.ndim = 1; c.elem_size = 2;
      c.shape[0] = piece / 2; c.src_strides[0] = 2; c.dst_strides[0] = 2;
      many.push_back(c);
    }
    auto per_fragment = [many, piece] {
      for (const StridedCopy& c : many) {
        FERRY_RETURN_IF_ERROR(CopyDeviceToDeviceAsync(c.dst, c.src, piece, nullptr));
      }
      return Status::Ok();
    };
    cases.push_back({name, many, kBytes, per_fragment});
  };
  contiguous("dense 1 GiB", kBytes);
  contiguous("4096 x 256 KiB fragments", 256 << 10);
  contiguous("65536 x 16 KiB fragments", 16 << 10);
  // Column shards [:, 0:cols/2] of `count` row-major bf16 [rows, cols] matrices, packed densely.
  auto column_shards = [&](const std::string& name, int64_t count, int64_t rows, int64_t cols) {
    std::vector<StridedCopy> shards;
    const int64_t matrix = rows * cols * 2, shard = matrix / 2;
    for (int64_t m = 0; m < count; ++m) {
      StridedCopy c;
      c.src = s + m * matrix; c.dst = d + m * shard; c.ndim = 2; c.elem_size = 2;
      c.shape = {rows, cols / 2};
      c.src_strides = {cols * 2, 2};
      c.dst_strides = {cols, 2};
      shards.push_back(c);
    }
    auto per_fragment = [shards, rows, cols] {
      for (const StridedCopy& c : shards) {
        FERRY_RETURN_IF_ERROR(
            CopyDeviceToDevice2DAsync(c.dst, cols, c.src, cols * 2, cols, rows, nullptr));
      }
      return Status::Ok();
    };
    cases.push_back({name, shards, count * shard, per_fragment});
  };
  column_shards("column shard of 16384x32768 bf16", 1, 16384, 32768);
  column_shards("512 column shards of 512x2048 bf16", 512, 512, 2048);
  // Short rows, as a scaled expert preset makes them: Qwen3-30B-A3B at 1/4 reads its experts'
  // down projections as 512 rows of 96 bytes (half of each 192-byte row) and its fused gate/up
  // projections as 48 rows of 1 KiB (half of each 2 KiB row).
  column_shards("10922 column shards of 512x96 bf16", 10922, 512, 96);
  column_shards("10922 column shards of 48x1024 bf16", 10922, 48, 1024);
  {
    StridedCopy c;
    c.src = s; c.dst = d; c.ndim = 1; c.elem_size = 2;
    c.shape[0] = kBytes / 4; c.src_strides[0] = 4; c.dst_strides[0] = 2;
    cases.push_back({"2-byte elements at stride 2", {c}, kBytes / 2, nullptr});
  }

  // kernel: descriptors built and uploaded per launch; table: uploaded once (CopyTable, as direct
  // reads reuse it); per fragment: the reference way; the ratios are bandwidth over memcpy's and
  // the per-fragment time over the table's.
  std::printf("%-36s %9s %8s %6s %9s %6s %11s %8s\n", "case", "kernel ms", "GB/s", "vs cpy",
              "table ms", "vs cpy", "per-frag ms", "speedup");
  const double memcpy_gbps = 2.0 * kBytes / memcpy_s / 1e9;
  std::printf("%-36s %9.3f %8.1f %6.2f\n", "cudaMemcpyAsync D2D 1 GiB", memcpy_s * 1e3, memcpy_gbps,
              1.0);
  for (const Case& c : cases) {
    const double t = TimeSeconds([&] { return LaunchBatchedCopy(c.copies, nullptr); }, 20);
    auto table = CopyTable::Upload(c.copies, nullptr);
    if (!table.ok()) return 1;
    const double tt = TimeSeconds([&] { return (*table)->Launch(); }, 20);
    const double tf = c.per_fragment ? TimeSeconds(c.per_fragment, 5) : 0;
    const double gbps = 2.0 * c.bytes / t / 1e9, table_gbps = 2.0 * c.bytes / tt / 1e9;
    std::printf("%-36s %9.3f %8.1f %6.2f %9.3f %6.2f", c.name.c_str(), t * 1e3, gbps,
                gbps / memcpy_gbps, tt * 1e3, table_gbps / memcpy_gbps);
    if (c.per_fragment) std::printf(" %11.3f %7.1fx", tf * 1e3, tf / tt);
    std::printf("\n");
  }
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main() { return ferry::cuda::Main(); }
