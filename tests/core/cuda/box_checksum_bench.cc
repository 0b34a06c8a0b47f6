// GPU benchmark of the box checksums (what `ferry run --memory cuda --verify` launches) beside a
// cudaMemcpyAsync device-to-device of 1 GiB in the same run: one dense region, thousands of
// fragments, and a column shard of a row-major bf16 matrix. Each checksum call is timed whole
// (descriptor upload, kernel, sums back, synchronisation), median of 11 after 3 warm-ups, on
// random data. Bandwidth counts the bytes read; the copy's counts read + write, the device's
// memory traffic ceiling.
// Run: bazel-bin/tests/core/cuda/box_checksum_bench (needs a GPU; exits 0 with a note otherwise).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/box_checksum.h"
#include "tests/core/cuda/bench_device.h"

namespace ferry::cuda {
namespace {

constexpr int64_t kBytes = int64_t{1} << 30;

double MedianSeconds(const std::function<Status()>& call) {
  for (int i = 0; i < 3; ++i) (void)call();
  std::vector<double> times;
  for (int i = 0; i < 11; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Status s = call();
    const Status synced = SynchronizeStream(nullptr);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!s.ok() || !synced.ok()) {
      std::fprintf(stderr, "%s %s\n", s.ToString().c_str(), synced.ToString().c_str());
      return -1;
    }
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

StridedCopy Box(const unsigned char* at, std::array<int64_t, kMaxCopyDims> shape,
                std::array<int64_t, kMaxCopyDims> strides, int ndim) {
  StridedCopy box;
  box.src = at;
  box.ndim = ndim;
  box.elem_size = 2;
  box.shape = shape;
  box.src_strides = strides;
  return box;
}

int Main() {
  if (!FoundDevice("box_checksum_bench")) return 0;
  Result<void*> src = DeviceAlloc(kBytes);
  Result<void*> dst = DeviceAlloc(kBytes);
  if (!src.ok() || !dst.ok()) return 1;
  std::vector<uint64_t> noise(kBytes / 8);
  std::mt19937_64 rng(3);
  for (auto& w : noise) w = rng();
  if (!CopyToDevice(*src, noise.data(), kBytes).ok()) return 1;
  const auto* s = static_cast<const unsigned char*>(*src);

  struct Case {
    std::string name;
    std::vector<StridedCopy> boxes;
    int64_t bytes;
  };
  std::vector<Case> cases;
  cases.push_back({"dense 1 GiB bf16", {Box(s, {kBytes / 2}, {2}, 1)}, kBytes});
  std::vector<StridedCopy> many;
  for (int64_t off = 0; off < kBytes; off += 256 << 10) many.push_back(Box(s + off, {128 << 10}, {2}, 1));
  cases.push_back({"4096 x 256 KiB fragments", many, kBytes});
  cases.push_back({"column shard of 16384x32768 bf16", {Box(s, {16384, 16384}, {32768 * 2, 2}, 2)},
                   int64_t{16384} * 16384 * 2});

  const double copy_s = MedianSeconds([&] { return CopyDeviceToDeviceAsync(*dst, *src, kBytes, nullptr); });
  const double copy_gbps = 2.0 * kBytes / copy_s / 1e9;
  std::printf("%-36s %10s %14s %12s\n", "case", "time (ms)", "GB/s", "vs memcpy");
  std::printf("%-36s %10.3f %14.1f %12.2f\n", "cudaMemcpyAsync D2D 1 GiB (r+w)", copy_s * 1e3, copy_gbps, 1.0);
  for (const Case& c : cases) {
    const double t = MedianSeconds([&] { return BoxChecksums(c.boxes, nullptr).status(); });
    const double gbps = c.bytes / t / 1e9;
    std::printf("%-36s %10.3f %14.1f %12.2f\n", ("checksum " + c.name + " (r)").c_str(), t * 1e3, gbps,
                gbps / copy_gbps);
  }
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main() { return ferry::cuda::Main(); }
