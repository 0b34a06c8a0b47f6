// The ceiling a refit between GPUs of one host is measured against: large cudaMemcpyPeerAsync
// copies between the host's GPUs, with peer access enabled (NVLink where the GPUs have it), from
// one process with one stream a copy:
//   pair:  GPU --from to GPU --to alone;
//   ring:  every GPU i to GPU (i + 1) % N at once (each GPU sends once and receives once);
//   all:   every ordered pair of distinct GPUs at once (each GPU sends N - 1 and receives N - 1);
//   d2d:   each GPU copies within itself at once (the only ceiling a one-GPU machine has).
// Bandwidth = bytes copied by all streams / (end of the last - start of the first), each stream
// running --iters copies of --bytes after two warm-ups; also the bandwidth a GPU sends (received
// per GPU for d2d). Prints one line a mode; exits 1 on a CUDA error, 2 on bad arguments.
// Run: peer_copy_ceiling [--modes pair,ring,all,d2d] [--bytes 1073741824] [--iters 20]
//      [--from 0] [--to 1]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Options {
  std::vector<std::string> modes = {"pair", "ring", "all", "d2d"};
  int64_t bytes = int64_t{1} << 30;
  int iters = 20;
  int from = 0;
  int to = 1;
};

// One copy stream: `bytes` from `src` on GPU `src_gpu` to `dst` on GPU `dst_gpu`, issued on a
// stream of the source GPU (its copy engines push over NVLink).
struct Lane {
  int src_gpu = 0, dst_gpu = 0;
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
};

bool Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "peer_copy_ceiling: %s: %s\n", what, cudaGetErrorString(err));
  return false;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<std::pair<int, int>> PairsOf(const std::string& mode, int gpus, const Options& o) {
  std::vector<std::pair<int, int>> pairs;
  if (mode == "pair") {
    pairs.emplace_back(o.from, o.to);
  } else if (mode == "ring") {
    for (int i = 0; i < gpus; ++i) pairs.emplace_back(i, (i + 1) % gpus);
  } else if (mode == "all") {
    for (int i = 0; i < gpus; ++i)
      for (int j = 0; j < gpus; ++j)
        if (i != j) pairs.emplace_back(i, j);
  } else if (mode == "d2d") {
    for (int i = 0; i < gpus; ++i) pairs.emplace_back(i, i);
  }
  return pairs;
}

bool EnablePeers(int gpus) {
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      if (i == j) continue;
      int can = 0;
      if (!Check(cudaDeviceCanAccessPeer(&can, i, j), "cudaDeviceCanAccessPeer")) return false;
      if (!can) {
        std::printf("GPU %d cannot access GPU %d as a peer: copies between them go through the host\n", i, j);
        continue;
      }
      if (!Check(cudaSetDevice(i), "cudaSetDevice")) return false;
      const cudaError_t err = cudaDeviceEnablePeerAccess(j, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else if (!Check(err, "cudaDeviceEnablePeerAccess")) {
        return false;
      }
    }
  }
  return true;
}

bool MakeLanes(const std::vector<std::pair<int, int>>& pairs, int64_t bytes, std::vector<Lane>& lanes) {
  for (const auto& [from, to] : pairs) {
    Lane lane{from, to};
    if (!Check(cudaSetDevice(to), "cudaSetDevice") || !Check(cudaMalloc(&lane.dst, bytes), "cudaMalloc dst") ||
        !Check(cudaSetDevice(from), "cudaSetDevice") || !Check(cudaMalloc(&lane.src, bytes), "cudaMalloc src") ||
        !Check(cudaMemset(lane.src, 0x5a, bytes), "cudaMemset") ||
        !Check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
      return false;
    }
    lanes.push_back(lane);
  }
  return true;
}

void FreeLanes(std::vector<Lane>& lanes) {
  for (Lane& lane : lanes) {
    cudaSetDevice(lane.src_gpu);
    cudaStreamDestroy(lane.stream);
    cudaFree(lane.src);
    cudaSetDevice(lane.dst_gpu);
    cudaFree(lane.dst);
  }
  lanes.clear();
}

bool Issue(const std::vector<Lane>& lanes, int64_t bytes, int copies) {
  for (int k = 0; k < copies; ++k) {
    for (const Lane& lane : lanes) {
      if (!Check(cudaSetDevice(lane.src_gpu), "cudaSetDevice")) return false;
      if (!Check(cudaMemcpyPeerAsync(lane.dst, lane.dst_gpu, lane.src, lane.src_gpu, bytes, lane.stream),
                 "cudaMemcpyPeerAsync")) {
        return false;
      }
    }
  }
  for (const Lane& lane : lanes) {
    if (!Check(cudaStreamSynchronize(lane.stream), "cudaStreamSynchronize")) return false;
  }
  return true;
}

// Runs one mode; returns false on a CUDA error.
bool RunMode(const std::string& mode, int gpus, const Options& o) {
  const std::vector<std::pair<int, int>> pairs = PairsOf(mode, gpus, o);
  if (mode != "d2d" && gpus < 2) {
    std::printf("%-5s skipped: one GPU, no peer pairs\n", mode.c_str());
    return true;
  }
  std::vector<Lane> lanes;
  if (!MakeLanes(pairs, o.bytes, lanes) || !Issue(lanes, o.bytes, 2)) {
    FreeLanes(lanes);
    return false;
  }
  const int64_t start = NowNs();
  const bool ok = Issue(lanes, o.bytes, o.iters);
  const double seconds = static_cast<double>(NowNs() - start) * 1e-9;
  FreeLanes(lanes);
  if (!ok) return false;
  const double total = static_cast<double>(o.bytes) * o.iters * static_cast<double>(pairs.size());
  const int senders = mode == "pair" ? 1 : gpus;
  std::printf("%-5s %2zu copies at once, %lld MiB x %d each: %8.1f GB/s together, %7.1f GB/s a GPU\n",
              mode.c_str(), pairs.size(), static_cast<long long>(o.bytes >> 20), o.iters, total / seconds / 1e9,
              total / seconds / 1e9 / senders);
  return true;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

bool Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--modes") o.modes = SplitCommas(value);
    else if (key == "--bytes") o.bytes = std::atoll(value.c_str());
    else if (key == "--iters") o.iters = std::atoi(value.c_str());
    else if (key == "--from") o.from = std::atoi(value.c_str());
    else if (key == "--to") o.to = std::atoi(value.c_str());
    else return false;
  }
  if (argc % 2 == 0 || o.bytes <= 0 || o.iters <= 0) return false;
  for (const std::string& m : o.modes) {
    if (m != "pair" && m != "ring" && m != "all" && m != "d2d") return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: peer_copy_ceiling [--modes pair,ring,all,d2d] [--bytes N] [--iters N] "
                         "[--from GPU] [--to GPU]\n");
    return 2;
  }
  int gpus = 0;
  if (!Check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount")) return 1;
  if (gpus > 1 && (o.from < 0 || o.from >= gpus || o.to < 0 || o.to >= gpus || o.from == o.to)) {
    std::fprintf(stderr, "peer_copy_ceiling: --from %d --to %d: need two distinct GPUs of 0..%d\n", o.from, o.to,
                 gpus - 1);
    return 2;
  }
  cudaDeviceProp prop{};
  if (!Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  std::printf("peer_copy_ceiling: %d GPU(s), %s\n", gpus, prop.name);
  if (!EnablePeers(gpus)) return 1;
  for (const std::string& mode : o.modes) {
    if (!RunMode(mode, gpus, o)) return 1;
  }
  return 0;
}
