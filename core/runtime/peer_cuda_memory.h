// Peer CUDA memory, the CUDA side of core/runtime/peer_memory.h for the GPU direct reads of
// core/runtime/direct_read.h: a sender describes its device buffers by the IPC handles of their
// allocations (CudaExports, cached across runs: an export costs driver calls), and a receiver opens
// each peer allocation once (PeerCudaMappings) and keeps it across runs until a Sweep finds it
// unused, like PeerMappings does for host files; a buffer of this very process (ranks as threads
// of one process) is used as it is.
//
// Thread-safety: none; the executor thread exports and opens, the copy kernel reads.
#pragma once

#include <array>
#include <cstdint>
#include <map>

#include "core/base/status.h"
#include "core/runtime/peer_memory.h"

namespace ferry {

// This process's CUDA buffers as peers see them, by (base, bytes). Valid while the buffers are:
// Clear() before freeing or reallocating one (Executor::ForgetRegistrations does).
class CudaExports {
 public:
  // `memory` (kind kCuda, from cudaMalloc) described for peers: its allocation's IPC handle and
  // size and its offset there. Blocking on a miss (driver calls), a map lookup after.
  Result<PeerBuffer> Describe(const MemoryDesc& memory);
  void Clear() { exported_.clear(); }

 private:
  std::map<std::pair<const void*, int64_t>, PeerBuffer> exported_;
};

class PeerCudaMappings {
 public:
  PeerCudaMappings() = default;
  PeerCudaMappings(const PeerCudaMappings&) = delete;
  PeerCudaMappings& operator=(const PeerCudaMappings&) = delete;
  ~PeerCudaMappings();

  // The address in this process of peer buffer `buffer` (kind kCuda) of process `owner_pid`,
  // opening its allocation on `device` (this process's device) the first time. Blocking.
  Result<const char*> Map(int64_t owner_pid, const PeerBuffer& buffer, int device);
  // Closes what was not used since the previous Sweep.
  void Sweep();
  void Clear();
  size_t size() const { return opened_.size(); }

 private:
  struct Opened {
    char* base = nullptr;
    bool used = false;
  };
  std::map<std::pair<int64_t, std::array<uint8_t, kCudaIpcHandleBytes>>, Opened> opened_;
};

}  // namespace ferry
