// Peer CUDA memory, the CUDA side of core/runtime/peer_memory.h for the GPU direct reads of
// core/runtime/direct_read.h: a sender describes its device buffers by the IPC handles of their
// allocations (CudaExports, cached across runs: an export costs driver calls), and a receiver opens
// each peer allocation once (PeerCudaMappings) and keeps it across runs until a Sweep finds it
// unused, like PeerMappings does for host files; a buffer of this very process (ranks as threads
// of one process) is used as it is.
//
// Buffers in cuMem* (VMM) memory, such as PyTorch's with expandable_segments (core/cuda/vmm.h),
// have no legacy IPC handle. The sender exports the mappings that cover such a buffer as POSIX
// fds, keeps them open with a table of them (cuda::VmmChunk) in its own memory, and offers a
// VmmRecord saying where that table lies. The receiver copies the table out of the sender's
// memory (process_vm_readv; the sender's process is verified and checked alive after the copies
// as for host reads), takes each fd from the sender's verified pidfd (pidfd_getfd: both need
// ptrace access to the sender, like host reads without shared memory), and maps the chunks side
// by side.
//
// One export serves every buffer whose mappings touch or overlap another's: ferry run and PyTorch
// put thousands of tensors in one range of mappings, and a receiver that mapped each buffer's
// mappings on their own would map every mapping many times over and look each span up on every
// refit. The sender joins the mapped ranges of its source buffers (its neighbours) once and
// exports each joined range on first use; a buffer outside them, or in a range that cannot be
// exported whole, is exported on its own.
// Every export keeps one fd per mapping open, so the first VMM export or import raises this
// process's soft limit on open files to its hard limit.
//
// Thread-safety: none; the executor thread exports and opens, the copy kernel reads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/vmm.h"
#include "core/runtime/peer_memory.h"

namespace ferry {

// Device address ranges [first, second).
using AddressRange = std::pair<uintptr_t, uintptr_t>;
// `ranges` joined where they overlap or touch, in address order.
std::vector<AddressRange> JoinTouchingRanges(std::vector<AddressRange> ranges);

// A VMM export as PeerBuffer::ipc_handle carries it: a number no other export of the owner
// process had, and where its table of `chunks` cuda::VmmChunk records lies in the owner's memory.
struct VmmRecord {
  uint64_t export_id = 0;
  uint64_t table = 0;
  int64_t chunks = 0;
};
void PutVmmRecord(const VmmRecord& record, std::array<uint8_t, kCudaIpcHandleBytes>& handle);
VmmRecord GetVmmRecord(const std::array<uint8_t, kCudaIpcHandleBytes>& handle);

// This process's CUDA buffers as peers see them, by (base, bytes). Valid while the buffers are:
// Clear() before freeing or reallocating one (Executor::ForgetRegistrations does).
// `memory` (kind kCuda, from cudaMalloc) described for peers by its allocation's legacy IPC
// handle, its size and `memory`'s offset there, uncached. Blocking (driver calls).
Result<PeerBuffer> DescribeCudaAllocation(const MemoryDesc& memory);

class CudaExports {
 public:
  CudaExports() = default;
  CudaExports(const CudaExports&) = delete;
  CudaExports& operator=(const CudaExports&) = delete;
  ~CudaExports() { Clear(); }

  // `memory` (kind kCuda) described for peers: for cudaMalloc memory its allocation's IPC handle
  // and size and its offset there; for VMM memory the span of mappings holding it, exported (its
  // fds stay open until Clear). `neighbours` are this process's buffers that peers read (`memory`
  // among them): the first VMM buffer described joins their mapped ranges, and VMM buffers in one
  // joined range share its export. Blocking on a miss (driver calls), a map lookup after.
  Result<PeerBuffer> Describe(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours = {});
  // Forgets every export and closes the fds of VMM exports; the next VMM Describe joins ranges
  // anew.
  void Clear();

 private:
  // An exported span and the export number peers know it by.
  struct HeldVmm {
    cuda::VmmSpan span;
    uint64_t export_id = 0;
  };
  // A joined range of neighbours' mappings, exported on first use.
  struct VmmGroup {
    uintptr_t end = 0;
    std::unique_ptr<HeldVmm> held;
    bool failed = false;  // could not be exported whole: its buffers are exported on their own
  };
  Result<PeerBuffer> DescribeVmm(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours);
  void JoinNeighbours(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours);
  // The export of the joined range holding `memory`; null when there is none.
  const HeldVmm* GroupExport(const MemoryDesc& memory);

  std::map<std::pair<const void*, int64_t>, PeerBuffer> exported_;
  std::map<uintptr_t, VmmGroup> groups_;  // by start; disjoint
  bool grouped_ = false;
  std::map<std::pair<const void*, int64_t>, std::unique_ptr<HeldVmm>> alone_;  // buffers outside groups
};

// A peer process as a receiver reaches its memory: its pid and, where the peer was verified, a
// pidfd of this process for it (-1: none; VMM buffers then cannot be opened).
struct PeerOwner {
  int64_t pid = 0;
  int pidfd = -1;
};

class PeerCudaMappings {
 public:
  PeerCudaMappings() = default;
  PeerCudaMappings(const PeerCudaMappings&) = delete;
  PeerCudaMappings& operator=(const PeerCudaMappings&) = delete;
  ~PeerCudaMappings();

  // The address in this process of peer buffer `buffer` (kind kCuda) of process `owner`, opening
  // its allocation (or, for a VMM buffer, mapping its span) on `device` (this process's device)
  // the first time. Blocking.
  Result<const char*> Map(const PeerOwner& owner, const PeerBuffer& buffer, int device);
  // Closes what was not used since the previous Sweep.
  void Sweep();
  void Clear();
  size_t size() const { return opened_.size(); }

 private:
  struct Opened {
    char* base = nullptr;
    bool used = false;
    std::vector<cuda::VmmChunk> vmm_chunks;  // a VMM span: its chunks (offsets and sizes)
    int64_t vmm_bytes = 0;
  };
  Result<Opened> MapVmm(const PeerOwner& owner, const PeerBuffer& buffer, int device);
  static void Close(Opened& opened);
  std::map<std::pair<int64_t, std::array<uint8_t, kCudaIpcHandleBytes>>, Opened> opened_;
};

}  // namespace ferry
