// What one small op costs on this machine's GPU and CPU: the simulator's op_post_overhead (the
// executor thread's time an op) and kernel_overhead (the GPU's time a kernel beyond its bytes;
// docs/simulator.md, "Free parameters"). For each kind of launch — the executor's (CopyStream::Launch
// of one small batched copy: a kernel and an event, core/cuda/copy_stream.h) and a bare
// cudaMemcpyAsync device-to-device for comparison — it measures
//   cpu: the calling thread's wall time a launch, kLaunches launches back to back (the GPU runs them
//        meanwhile, so a launch queue that fills makes this the larger of the two costs);
//   gpu: the GPU's time a launch, kQueued launches queued behind a host function that holds the
//        stream until the last is queued, timed by events around them: back-to-back tiny kernels
//        with the launch cost off the GPU's path.
// Medians of kRounds rounds. Run: bazel-bin/tests/core/cuda/launch_overhead_bench [BYTES] (the size
// of each op, 256 by default; needs a GPU, exits 0 with a note otherwise).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/copy_stream.h"

namespace ferry::cuda {
namespace {

constexpr int kLaunches = 4000;
// Few enough that a launch, its event and its descriptor upload stay within the stream's queue of
// pending work, which would otherwise block the launching thread behind the held stream.
constexpr int kQueued = 100;
constexpr int kRounds = 9;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Holds the stream it is enqueued on until `open` is set or a second has passed (a launch that
// blocked on a full queue must not wait forever).
void CUDART_CB Hold(void* open) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!static_cast<std::atomic<bool>*>(open)->load() && std::chrono::steady_clock::now() < until) {
  }
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "launch_overhead_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Seconds of the calling thread a launch, `launch` called kLaunches times back to back.
double CpuSecondsPerLaunch(const std::function<bool()>& launch, cudaStream_t stream) {
  std::vector<double> rounds;
  for (int r = 0; r < kRounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) {
      if (!launch()) return -1;
    }
    rounds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kLaunches);
    if (!Check(cudaStreamSynchronize(stream), "synchronize")) return -1;
  }
  return Median(rounds);
}

// Seconds of the GPU a launch: kQueued launches held behind Hold, timed by events around them.
double GpuSecondsPerLaunch(const std::function<bool()>& launch, cudaStream_t stream) {
  cudaEvent_t begin, end;
  if (!Check(cudaEventCreate(&begin), "event") || !Check(cudaEventCreate(&end), "event")) return -1;
  std::vector<double> rounds;
  for (int r = 0; r < kRounds; ++r) {
    std::atomic<bool> open{false};
    if (!Check(cudaLaunchHostFunc(stream, Hold, &open), "host function") ||
        !Check(cudaEventRecord(begin, stream), "record")) {
      return -1;
    }
    const auto queuing = std::chrono::steady_clock::now();
    for (int i = 0; i < kQueued; ++i) {
      if (!launch()) return -1;
    }
    const double queued = std::chrono::duration<double>(std::chrono::steady_clock::now() - queuing).count();
    if (!Check(cudaEventRecord(end, stream), "record")) return -1;
    open.store(true);
    if (!Check(cudaStreamSynchronize(stream), "synchronize")) return -1;
    if (queued > 0.9) {
      std::fprintf(stderr, "launch_overhead_bench: queuing %d launches took %.2f s: the stream's queue is full\n",
                   kQueued, queued);
      return -1;
    }
    float ms = 0;
    if (!Check(cudaEventElapsedTime(&ms, begin, end), "elapsed")) return -1;
    rounds.push_back(static_cast<double>(ms) * 1e-3 / kQueued);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return Median(rounds);
}

void Report(const char* name, double cpu, double gpu) {
  std::printf("launch_overhead: %-44s cpu %6.2f us a launch, gpu %6.2f us a launch back to back\n", name,
              cpu * 1e6, gpu * 1e6);
}

int Main(int argc, char** argv) {
  if (DeviceCount() == 0) {
    std::printf("launch_overhead_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  const int64_t bytes = argc > 1 ? std::atoll(argv[1]) : 256;
  if (bytes <= 0 || bytes % 2 != 0 || bytes > (int64_t{1} << 30)) {
    std::fprintf(stderr, "launch_overhead_bench: BYTES must be even, from 2 to 1 GiB\n");
    return 2;
  }
  std::printf("device: %s; ops of %lld bytes\n", DeviceName(0).c_str(), static_cast<long long>(bytes));
  Result<std::unique_ptr<CopyStream>> copy_stream = CopyStream::Create(0);
  Result<void*> src = DeviceAlloc(bytes), dst = DeviceAlloc(bytes);
  if (!copy_stream.ok() || !src.ok() || !dst.ok()) {
    std::fprintf(stderr, "launch_overhead_bench: no stream or no memory\n");
    return 1;
  }
  auto stream = static_cast<cudaStream_t>((*copy_stream)->stream());
  StridedCopy copy;
  copy.src = *src;
  copy.dst = *dst;
  copy.elem_size = 2;
  copy.shape[0] = bytes / 2;
  copy.src_strides[0] = copy.dst_strides[0] = 2;
  const std::vector<StridedCopy> one{copy};
  std::vector<int64_t> tickets;
  auto executor_launch = [&] {
    Result<int64_t> ticket = (*copy_stream)->Launch(one);
    if (!ticket.ok()) std::fprintf(stderr, "launch_overhead_bench: %s\n", ticket.status().ToString().c_str());
    if (ticket.ok()) tickets.push_back(*ticket);
    return ticket.ok();
  };
  auto memcpy_launch = [&] { return Check(cudaMemcpyAsync(*dst, *src, bytes, cudaMemcpyDeviceToDevice, stream), "memcpy"); };
  for (int i = 0; i < 100; ++i) {  // warm-up
    if (!executor_launch() || !memcpy_launch()) return 1;
  }
  const double executor_cpu = CpuSecondsPerLaunch(executor_launch, stream);
  const double executor_gpu = GpuSecondsPerLaunch(executor_launch, stream);
  const double memcpy_cpu = CpuSecondsPerLaunch(memcpy_launch, stream);
  const double memcpy_gpu = GpuSecondsPerLaunch(memcpy_launch, stream);
  for (int64_t t : tickets) (void)(*copy_stream)->Finished(t);  // recycles their events
  if (executor_cpu < 0 || executor_gpu < 0 || memcpy_cpu < 0 || memcpy_gpu < 0) return 1;
  Report("executor copy (CopyStream::Launch, kernel + event)", executor_cpu, executor_gpu);
  Report("cudaMemcpyAsync device to device", memcpy_cpu, memcpy_gpu);
  (void)DeviceFree(*src);
  (void)DeviceFree(*dst);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main(int argc, char** argv) { return ferry::cuda::Main(argc, argv); }
