// The ceilings a CUDA refit between processes of one GPU is measured against: N processes, each
// with its own source and destination buffers of --bytes, copying concurrently
//   d2d:  its own source to its own destination with cudaMemcpyAsync (a plain device copy);
//   ipc:  the next process's source (opened through CUDA IPC) to its own destination with the
//         batched copy kernel, which is what a GPU direct read does;
//   ipc-plain: the same with a plain grid-stride copy kernel (plain_copy.h), a reference that
//         does not move with ferry's kernel.
// Bandwidth = bytes written by all processes / (last end - first start), the way `ferry run`
// counts bytes delivered; each process runs --iters copies after two warm-ups, between barriers.
// Run: ipc_copy_ceiling --mode ipc --procs 8 --bytes 33554432 --iters 20 (needs a GPU).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "core/cuda/copy_stream.h"
#include "core/cuda/ipc.h"
#include "tests/core/cuda/plain_copy.h"

namespace ferry::cuda {
namespace {

constexpr int kMaxProcs = 64;

// Lives in memory shared by the parent and its children (mapped before fork).
struct Shared {
  std::atomic<int> arrived[4];
  IpcHandle handles[kMaxProcs];
  int64_t start_ns[kMaxProcs];
  int64_t end_ns[kMaxProcs];
};

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Barrier(Shared* s, int k, int procs) {
  s->arrived[k].fetch_add(1);
  while (s->arrived[k].load() < procs) usleep(50);
}

StridedCopy Contiguous(const void* from, void* to, int64_t bytes) {
  StridedCopy c;
  c.src = from;
  c.dst = to;
  c.shape[0] = bytes;
  c.src_strides[0] = 1;
  c.dst_strides[0] = 1;
  return c;
}

#define CHECK_OK(expr)                                                              \
  do {                                                                              \
    ::ferry::Status _s = (expr);                                                    \
    if (!_s.ok()) {                                                                 \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, _s.ToString().c_str()); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int Child(Shared* s, int rank, int procs, const std::string& mode, int64_t bytes, int iters) {
  CHECK_OK(SetDevice(0));
  auto src = DeviceAlloc(bytes);
  auto dst = DeviceAlloc(bytes);
  CHECK_OK(src.status());
  CHECK_OK(dst.status());
  std::vector<unsigned char> pattern(static_cast<size_t>(bytes));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 7 + rank);
  CHECK_OK(CopyToDevice(*src, pattern.data(), bytes));
  auto exported = ExportIpcMemory(*src);
  CHECK_OK(exported.status());
  s->handles[rank] = exported->handle;
  Barrier(s, 0, procs);
  const void* from = *src;
  const bool ipc = mode == "ipc" || mode == "ipc-plain";
  if (ipc) {
    auto peer = OpenIpcMemory(s->handles[(rank + 1) % procs], 0);
    CHECK_OK(peer.status());
    from = *peer;
  }
  auto copy = [&]() -> Status {
    if (mode == "d2d") return CopyDeviceToDeviceAsync(*dst, from, bytes, nullptr);
    if (mode == "ipc-plain") return LaunchPlainCopy(*dst, from, bytes, nullptr);
    return LaunchBatchedCopy({Contiguous(from, *dst, bytes)}, nullptr);
  };
  for (int i = 0; i < 2; ++i) CHECK_OK(copy());
  CHECK_OK(SynchronizeStream(nullptr));
  Barrier(s, 1, procs);
  s->start_ns[rank] = Now();
  for (int i = 0; i < iters; ++i) CHECK_OK(copy());
  CHECK_OK(SynchronizeStream(nullptr));
  s->end_ns[rank] = Now();
  Barrier(s, 2, procs);
  std::vector<unsigned char> back(static_cast<size_t>(bytes));
  CHECK_OK(CopyToHost(back.data(), *dst, bytes));
  const int owner = ipc ? (rank + 1) % procs : rank;
  for (size_t i = 0; i < back.size(); i += 4093) {
    if (back[i] != static_cast<unsigned char>(i * 7 + owner)) {
      std::fprintf(stderr, "rank %d: wrong byte at %zu\n", rank, i);
      return 1;
    }
  }
  if (ipc) CHECK_OK(CloseIpcMemory(const_cast<void*>(from)));
  Barrier(s, 3, procs);
  return 0;
}

int Main(int argc, char** argv) {
  std::string mode = "ipc";
  int procs = 8, iters = 20;
  int64_t bytes = int64_t{32} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mode") mode = argv[i + 1];
    else if (flag == "--procs") procs = std::atoi(argv[i + 1]);
    else if (flag == "--bytes") bytes = std::atoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::atoi(argv[i + 1]);
  }
  const bool known = mode == "ipc" || mode == "ipc-plain" || mode == "d2d";
  if (!known || procs < 1 || procs > kMaxProcs || bytes <= 0) {
    std::fprintf(stderr,
                 "usage: ipc_copy_ceiling --mode ipc|ipc-plain|d2d --procs N --bytes B --iters K\n");
    return 2;
  }
  auto* s = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (s == MAP_FAILED) return 1;
  new (s) Shared{};
  std::vector<pid_t> children;
  for (int r = 0; r < procs; ++r) {  // fork before any CUDA call: children initialise their own
    const pid_t pid = fork();
    if (pid == 0) _exit(Child(s, r, procs, mode, bytes, iters));
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "ipc_copy_ceiling: a process failed\n");
    return 1;
  }
  int64_t first = s->start_ns[0], last = s->end_ns[0];
  for (int r = 1; r < procs; ++r) {
    first = std::min(first, s->start_ns[r]);
    last = std::max(last, s->end_ns[r]);
  }
  const double seconds = static_cast<double>(last - first) / 1e9;
  const double gbps = static_cast<double>(bytes) * procs * iters / seconds / 1e9;
  std::printf("ipc_copy_ceiling mode=%s procs=%d bytes_per_proc=%lld iters=%d: %.1f GB/s written\n",
              mode.c_str(), procs, static_cast<long long>(bytes), iters, gbps);
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main(int argc, char** argv) { return ferry::cuda::Main(argc, argv); }
