// Peer memory: reading another process's host memory on the same machine, in one copy.
//
// The executor's direct intra-node path (core/runtime/direct_read.h) lets a receiver copy straight
// from a same-node sender's source buffers into its own destination buffers, instead of the
// sender packing into staging, the transport copying, and the receiver unpacking. Two ways to
// reach the sender's memory, chosen per buffer:
//  * shared mapping: the sender allocated the buffer with SharedHostMemory (a memfd); the receiver
//    opens /proc/<pid>/fd/<fd> and maps it read-only (PeerMappings, cached), then copies with
//    ordinary loads and stores — the fast path for the many short rows of strided shards;
//  * cross-memory attach: for any other host memory, process_vm_readv reads the sender's
//    address space, strided regions included (ReadFromPeer, core/runtime/peer_read.h).
// Both need the peer on the same host under the same user (ptrace "read" access to it). A process
// identity (pid + boot id) travels with every address, but the pid used is the one the kernel
// verified for the sending rank (core/runtime/peer_process.h): an offer naming another process
// is refused instead of read.
//
// Thread-safety: SharedHostMemory is a plain owner (not shared between threads while moved);
// PeerMappings is not thread-safe (the executor thread maps, copy threads only read the mapped
// memory).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "core/base/status.h"
#include "core/runtime/transport.h"

namespace ferry {

// Host memory other processes of this machine can map: a memfd mapped read-write here. The
// descriptor (desc()) carries the fd so the executor can offer the block to same-node peers.
class SharedHostMemory {
 public:
  // Allocates `bytes` (at least one page), zero-filled. `name` shows up in /proc/<pid>/maps.
  static Result<SharedHostMemory> Allocate(int64_t bytes, const std::string& name);

  SharedHostMemory() = default;
  SharedHostMemory(SharedHostMemory&& other) noexcept;
  SharedHostMemory& operator=(SharedHostMemory&& other) noexcept;
  SharedHostMemory(const SharedHostMemory&) = delete;
  SharedHostMemory& operator=(const SharedHostMemory&) = delete;
  ~SharedHostMemory();

  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryDesc desc() const { return Sub(0, bytes_); }
  // [offset, offset + bytes) of the block as its own buffer: {data() + offset, bytes, kHost, -1,
  // fd, offset}. Many buffers in one block cost peers one mapping.
  MemoryDesc Sub(int64_t offset, int64_t bytes) const;

 private:
  void Release();
  char* data_ = nullptr;
  int64_t bytes_ = 0;
  int64_t mapped_bytes_ = 0;
  int fd_ = -1;
};

// Who owns an address: a process on one boot of one machine.
struct ProcessIdentity {
  int64_t pid = 0;
  std::string boot_id;  // /proc/sys/kernel/random/boot_id, 36 characters

  static const ProcessIdentity& Self();
};

inline constexpr size_t kCudaIpcHandleBytes = 64;

// One buffer of a peer as its owner describes it.
struct PeerBuffer {
  uint64_t address = 0;  // base address in the owner's address space (a device address for kCuda)
  int64_t bytes = 0;
  int shared_fd = -1;    // host: the owner's fd of the file behind it, or -1
  int64_t shared_offset = 0;  // host: offset in that file; kCuda: offset in its allocation
  uint64_t inode = 0;    // of that file (guards against a recycled fd)
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;               // kCuda: the owner's device ordinal
  int64_t allocation_bytes = 0;  // kCuda: size of the cudaMalloc allocation holding the buffer
  std::array<uint8_t, kCudaIpcHandleBytes> ipc_handle{};  // kCuda: the allocation's IPC handle
  // kCuda in cuMem* (VMM) mappings: allocation_bytes and shared_offset then describe the span of
  // mappings holding the buffer, and ipc_handle holds ferry's record of the export
  // (peer_cuda_memory.h VmmRecord) instead of a CUDA IPC handle.
  bool cuda_vmm = false;
};

// Describes this process's host `memory` for peers. fstat()s the shared file once per fd: keep one
// describer for the buffers of one run. (CUDA memory: CudaExports, peer_cuda_memory.h.)
class BufferDescriber {
 public:
  Result<PeerBuffer> Describe(const MemoryDesc& memory);

 private:
  std::map<int, std::pair<uint64_t, int64_t>> files_;  // fd -> (inode, size)
};

// Read-only mappings of peers' shared files (each mapped whole, once), cached until Sweep() finds
// them unused.
class PeerMappings {
 public:
  PeerMappings() = default;
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;
  ~PeerMappings();

  // The whole file behind `buffer` (which must have shared_fd >= 0): its start and length in this
  // process; the buffer is at start + shared_offset. Fails with kUnavailable when the owner is gone
  // or its fd is not the expected file, and with kFailedPrecondition when this process may not
  // open the owner's fds.
  struct File {
    const char* base = nullptr;
    int64_t length = 0;
  };
  Result<File> MapFile(const ProcessIdentity& owner, const PeerBuffer& buffer);
  // Unmaps what was not used since the previous Sweep.
  void Sweep();
  void Clear();
  size_t size() const { return maps_.size(); }

 private:
  struct Mapping {
    void* base = nullptr;
    size_t length = 0;     // mapped (at least one byte)
    int64_t file_bytes = 0;
    bool used = false;
  };
  // (pid, fd, inode)
  std::map<std::tuple<int64_t, int, uint64_t>, Mapping> maps_;
};

}  // namespace ferry
