// The staging arena: one block of host memory that holds a rank's staging slots (the packed bytes
// of messages on their way out or in), kept by the executor across runs, and the first-fit
// allocator that carves a run's slots out of it. For runs that touch CUDA memory the block is
// pinned (page-locked and mapped, core/cuda/copy_stream.h): the copy kernel packs into it and
// unpacks from it directly, and transports without GPU-direct send and receive it as host memory.
// For ranks whose every staging transport moves CUDA memory (NCCL, UCX with CUDA support;
// staging_memory.h decides) the block is device memory instead (ReallocateOnDevice): the copy
// kernel packs into it and the transport sends from it, with no host memory in the path.
//
// Ownership: StagingArena owns its block; a reallocation frees the old one, so whoever registered
// it with a transport must deregister it first. ArenaAllocator only hands out offsets.
// Thread-safety: none; both belong to the executor thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "core/base/status.h"

namespace ferry {

class StagingArena {
 public:
  StagingArena() = default;
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;
  ~StagingArena();

  char* data() const { return data_; }  // null while empty
  int64_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }
  bool on_device() const { return device_ >= 0; }
  int device() const { return device_; }  // -1 unless on_device()
  // Replaces the block by one of `bytes` bytes (uninitialised: staging is always written before it
  // is read), pinned when `pinned`. The old block's address is no longer valid. Fails only when
  // pinned memory cannot be had (no GPU, or the driver refuses).
  Status Reallocate(int64_t bytes, bool pinned);
  // Replaces the block by `bytes` of device memory on CUDA device `device` (the executor's stream's
  // device, current on the calling thread).
  Status ReallocateOnDevice(int64_t bytes, int device);

 private:
  void Free();
  char* data_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
  int device_ = -1;
};

// First-fit allocator over [0, capacity) of the arena, in 256-byte units.
class ArenaAllocator {
 public:
  // Forgets every allocation and manages [0, capacity).
  void Reset(int64_t capacity);
  // Returns the offset of `bytes` free bytes, or -1 when no free block is large enough.
  int64_t Allocate(int64_t bytes);
  // What an allocation of `bytes` takes of the arena: whole 256-byte units, at least one.
  static int64_t Granted(int64_t bytes) { return std::max<int64_t>((bytes + 255) & ~int64_t{255}, 256); }
  // Frees the allocation at `offset` (an offset Allocate returned), merging free neighbours.
  void Free(int64_t offset);
  int64_t in_use() const { return in_use_; }

 private:
  std::map<int64_t, int64_t> free_;               // offset -> bytes
  std::unordered_map<int64_t, int64_t> used_;     // offset -> bytes
  int64_t in_use_ = 0;
};

}  // namespace ferry
