// GPU benchmark of the batched strided-copy kernel against cudaMemcpyAsync device-to-device, on
// shapes a refit produces: one dense region, thousands of small fragments, a column shard of a
// row-major matrix (row-parallel TP), and 2-byte elements at stride 2 (interleaved halves).
// Bandwidth counts bytes read + bytes written, as a plain D2D copy is usually quoted.
// Run: bazel-bin/tests/core/cuda/batched_copy_bench (needs a GPU; exits 0 with a note otherwise).
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/batched_copy.h"

namespace ferry::cuda {
namespace {

constexpr int64_t kBytes = int64_t{1} << 30;

double TimeSeconds(const std::function<Status()>& launch, int iterations) {
  for (int i = 0; i < 3; ++i) (void)launch();
  (void)SynchronizeStream(nullptr);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) (void)launch();
  Status s = SynchronizeStream(nullptr);
  auto end = std::chrono::steady_clock::now();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return -1;
  }
  return std::chrono::duration<double>(end - start).count() / iterations;
}

int Main() {
  if (DeviceCount() == 0) {
    std::printf("batched_copy_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  std::printf("device: %s\n", DeviceName(0).c_str());
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
  };
  std::vector<Case> cases;
  {
    StridedCopy c;
    c.src = s; c.dst = d; c.ndim = 1; c.elem_size = 2;
    c.shape[0] = kBytes / 2; c.src_strides[0] = 2; c.dst_strides[0] = 2;
    cases.push_back({"dense 1 GiB", {c}, kBytes});
  }
  {
    std::vector<StridedCopy> many;
    const int64_t piece = 256 << 10;
    for (int64_t off = 0; off < kBytes; off += piece) {
      StridedCopy c;
      c.src = s + off; c.dst = d + (kBytes - piece - off); c.ndim = 1; c.elem_size = 2;
      c.shape[0] = piece / 2; c.src_strides[0] = 2; c.dst_strides[0] = 2;
      many.push_back(c);
    }
    cases.push_back({"4096 x 256 KiB fragments", many, kBytes});
  }
  {
    // bf16 [16384, 32768] matrix; copy the column shard [:, 0:16384] into a dense buffer.
    StridedCopy c;
    c.src = s; c.dst = d; c.ndim = 2; c.elem_size = 2;
    c.shape = {16384, 16384};
    c.src_strides = {32768 * 2, 2};
    c.dst_strides = {16384 * 2, 2};
    cases.push_back({"column shard of 16384x32768 bf16", {c}, int64_t{16384} * 16384 * 2});
  }
  {
    StridedCopy c;
    c.src = s; c.dst = d; c.ndim = 1; c.elem_size = 2;
    c.shape[0] = kBytes / 4; c.src_strides[0] = 4; c.dst_strides[0] = 2;
    cases.push_back({"2-byte elements at stride 2", {c}, kBytes / 2});
  }

  std::printf("%-36s %12s %12s %10s\n", "case", "time (ms)", "GB/s (r+w)", "vs memcpy");
  const double memcpy_gbps = 2.0 * kBytes / memcpy_s / 1e9;
  std::printf("%-36s %12.3f %12.1f %10.2f\n", "cudaMemcpyAsync D2D 1 GiB", memcpy_s * 1e3,
              memcpy_gbps, 1.0);
  for (const Case& c : cases) {
    const double t = TimeSeconds([&] { return LaunchBatchedCopy(c.copies, nullptr); }, 20);
    const double gbps = 2.0 * c.bytes / t / 1e9;
    std::printf("%-36s %12.3f %12.1f %10.2f\n", c.name.c_str(), t * 1e3, gbps, gbps / memcpy_gbps);
  }
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main() { return ferry::cuda::Main(); }
