// The ceilings a CUDA refit between processes of one GPU is measured against: N processes, each
// with its own source and destination buffers of --bytes, copying concurrently
//   d2d:  its own source to its own destination with cudaMemcpyAsync (a plain device copy);
//   ipc:  the next process's source (opened through CUDA IPC) to its own destination with the
//         batched copy kernel, which is what a GPU direct read does;
//   ipc-plain: the same with a plain grid-stride copy kernel (plain_copy.h), a reference that
//         does not move with ferry's kernel;
//   ipc-fp8: the next process's bf16 [rows, 8192] source into fp8 e4m3 with the batched convert
//         kernel, what a direct read into fp8 weights does (the simulator's fp8_convert_bandwidth,
//         in (read + written) / 2 bytes);
//   ipc-quantize: the same source block-quantized into e4m3 and fp32 scales with the block-quantize
//         kernel, what a quantizing direct read does (the simulator's quantize_bandwidth, in bytes
//         of fp8 and scales written).
// Bandwidth = bytes written by all processes / (last end - first start), the way `ferry run`
// counts bytes delivered, and bytes read the same way; each process runs --iters copies after
// two warm-ups, between barriers. The converting modes take --bytes of bf16 a process, rounded
// down to whole 128-row blocks of 8192 columns.
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

#include "core/base/float_convert.h"
#include "core/base/fp8_block.h"
#include "core/cuda/batched_convert.h"
#include "core/cuda/batched_copy.h"
#include "core/cuda/block_quantize.h"
#include "core/cuda/copy_stream.h"
#include "core/cuda/ipc.h"
#include "tests/core/cuda/plain_copy.h"

namespace ferry::cuda {
namespace {

constexpr int kMaxProcs = 64;
constexpr int64_t kCols = 8192;  // columns of the converting modes' matrices

bool Converting(const std::string& mode) { return mode == "ipc-fp8" || mode == "ipc-quantize"; }
bool ReadsPeer(const std::string& mode) { return mode != "d2d"; }

// What one process's copy reads, and writes into its destination.
struct Sizes {
  int64_t read = 0, written = 0, rows = 0;
};
Sizes SizesOf(const std::string& mode, int64_t bytes) {
  if (!Converting(mode)) return {bytes, bytes, 0};
  const int64_t rows = bytes / (2 * kCols) / kFp8BlockSize * kFp8BlockSize;
  const int64_t elements = rows * kCols;
  const int64_t scales = mode == "ipc-quantize" ? Fp8BlockCount(1, rows, kCols) * 4 : 0;
  return {2 * elements, elements + scales, rows};
}

// The first `bytes` of process `owner`'s source: a byte pattern for copies, bf16 values in
// [-8, 8) for the converting modes (distinct per owner, every block's amax a different value).
unsigned char CopyByte(size_t i, int owner) { return static_cast<unsigned char>(i * 7 + owner); }
uint16_t Bf16Element(size_t e, int owner) {
  return FloatToBF16(static_cast<float>((e * 13 + static_cast<size_t>(owner)) % 64) / 4.0f - 8.0f);
}
std::vector<unsigned char> SourceOf(const std::string& mode, int owner, int64_t bytes) {
  std::vector<unsigned char> out(static_cast<size_t>(bytes));
  if (!Converting(mode)) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = CopyByte(i, owner);
    return out;
  }
  for (size_t e = 0; 2 * e + 1 < out.size(); ++e) {
    const uint16_t bits = Bf16Element(e, owner);
    std::memcpy(&out[2 * e], &bits, 2);
  }
  return out;
}

// Checks process `owner`'s source as it arrived in `back` (what the destination holds): every
// 4093rd byte of a copy, every 4093rd element of a conversion, the first block row of a quantize
// (bf16 is little-endian on both sides).
bool Arrived(const std::string& mode, const std::vector<unsigned char>& back, const Sizes& z,
             int owner) {
  if (!Converting(mode)) {
    for (size_t i = 0; i < back.size(); i += 4093) {
      if (back[i] != CopyByte(i, owner)) return false;
    }
    return true;
  }
  if (mode == "ipc-fp8") {
    unsigned char want = 0;
    for (size_t e = 0; e < static_cast<size_t>(z.rows * kCols); e += 4093) {
      const uint16_t bits = Bf16Element(e, owner);
      const auto* from = reinterpret_cast<const unsigned char*>(&bits);
      ConvertElement(DType::kBF16, DType::kFP8E4M3, from, &want);
      if (back[e] != want) return false;
    }
    return true;
  }
  const int64_t rows = kFp8BlockSize;
  const std::vector<unsigned char> src = SourceOf(mode, owner, 2 * rows * kCols);
  std::vector<unsigned char> values(static_cast<size_t>(rows * kCols));
  std::vector<float> scales(static_cast<size_t>(kCols / kFp8BlockSize));
  Fp8BlockQuantizeBlocks(DType::kBF16, src.data(), rows, kCols, values.data(), scales.data(),
                         Fp8ScaleFormat::kFloat32, 0, kCols / kFp8BlockSize);
  const unsigned char* got_scales = back.data() + z.rows * kCols;
  return std::memcmp(back.data(), values.data(), values.size()) == 0 &&
         std::memcmp(got_scales, scales.data(), scales.size() * sizeof(float)) == 0;
}

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

// One copy of `mode` from `from` (bf16 [z.rows, kCols] for the converting modes) into `dst`.
Status CopyOnce(const std::string& mode, const void* from, void* dst, const Sizes& z) {
  if (mode == "d2d") return CopyDeviceToDeviceAsync(dst, from, z.read, nullptr);
  if (mode == "ipc-plain") return LaunchPlainCopy(dst, from, z.read, nullptr);
  if (mode == "ipc-fp8") {
    StridedConvert c;
    c.src = from;
    c.dst = dst;
    c.src_dtype = DType::kBF16;
    c.dst_dtype = DType::kFP8E4M3;
    c.ndim = 2;
    c.shape = {z.rows, kCols};
    c.src_strides = {2 * kCols, 2};
    c.dst_strides = {kCols, 1};
    return LaunchBatchedConvert({c}, nullptr);
  }
  if (mode == "ipc-quantize") {
    BlockQuantizeJob job;
    job.src = from;
    job.dst = dst;
    job.scales = static_cast<unsigned char*>(dst) + z.rows * kCols;
    job.rows = z.rows;
    job.cols = kCols;
    return LaunchBlockQuantize({job}, nullptr);
  }
  return LaunchBatchedCopy({Contiguous(from, dst, z.read)}, nullptr);
}

int Child(Shared* s, int rank, int procs, const std::string& mode, int64_t bytes, int iters) {
  const Sizes z = SizesOf(mode, bytes);
  CHECK_OK(SetDevice(0));
  auto src = DeviceAlloc(z.read);
  auto dst = DeviceAlloc(z.written);
  CHECK_OK(src.status());
  CHECK_OK(dst.status());
  const std::vector<unsigned char> pattern = SourceOf(mode, rank, z.read);
  CHECK_OK(CopyToDevice(*src, pattern.data(), z.read));
  auto exported = ExportIpcMemory(*src);
  CHECK_OK(exported.status());
  s->handles[rank] = exported->handle;
  Barrier(s, 0, procs);
  const void* from = *src;
  if (ReadsPeer(mode)) {
    auto peer = OpenIpcMemory(s->handles[(rank + 1) % procs], 0);
    CHECK_OK(peer.status());
    from = *peer;
  }
  for (int i = 0; i < 2; ++i) CHECK_OK(CopyOnce(mode, from, *dst, z));
  CHECK_OK(SynchronizeStream(nullptr));
  Barrier(s, 1, procs);
  s->start_ns[rank] = Now();
  for (int i = 0; i < iters; ++i) CHECK_OK(CopyOnce(mode, from, *dst, z));
  CHECK_OK(SynchronizeStream(nullptr));
  s->end_ns[rank] = Now();
  Barrier(s, 2, procs);
  std::vector<unsigned char> back(static_cast<size_t>(z.written));
  CHECK_OK(CopyToHost(back.data(), *dst, z.written));
  if (!Arrived(mode, back, z, ReadsPeer(mode) ? (rank + 1) % procs : rank)) {
    std::fprintf(stderr, "rank %d: the destination does not hold what %s should write\n", rank,
                 mode.c_str());
    return 1;
  }
  if (ReadsPeer(mode)) CHECK_OK(CloseIpcMemory(const_cast<void*>(from)));
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
  const bool known = mode == "ipc" || mode == "ipc-plain" || mode == "d2d" || Converting(mode);
  if (!known || procs < 1 || procs > kMaxProcs || bytes <= 0 ||
      (Converting(mode) && SizesOf(mode, bytes).rows == 0)) {
    std::fprintf(stderr,
                 "usage: ipc_copy_ceiling --mode ipc|ipc-plain|d2d|ipc-fp8|ipc-quantize --procs N "
                 "--bytes B --iters K\n  (the converting modes need B >= %lld: 128 rows of %lld "
                 "bf16)\n",
                 static_cast<long long>(2 * kFp8BlockSize * kCols), static_cast<long long>(kCols));
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
  const Sizes z = SizesOf(mode, bytes);
  auto rate = [&](int64_t per_copy) {
    return static_cast<double>(per_copy) * procs * iters / seconds / 1e9;
  };
  std::printf("ipc_copy_ceiling mode=%s procs=%d bytes_per_proc=%lld iters=%d: %.1f GB/s written, "
              "%.1f GB/s read\n",
              mode.c_str(), procs, static_cast<long long>(z.read), iters, rate(z.written),
              rate(z.read));
  return 0;
}

}  // namespace
}  // namespace ferry::cuda

int main(int argc, char** argv) { return ferry::cuda::Main(argc, argv); }
