// The staging arena: one block of host memory that holds a rank's staging slots (the packed bytes
// of messages on their way out or in), kept by the executor across runs; the executor places a
// run's slots in it as core/plan/staging_layout.h says. For runs that touch CUDA memory the block is
// pinned (page-locked and mapped, core/cuda/copy_stream.h): the copy kernel packs into it and
// unpacks from it directly, and transports without GPU-direct send and receive it as host memory.
// For ranks whose every staging transport moves CUDA memory (NCCL, UCX with CUDA support;
// staging_memory.h decides) the block is device memory instead (ReallocateOnDevice): the copy
// kernel packs into it and the transport sends from it, with no host memory in the path.
//
// Ownership: StagingArena owns its block; a reallocation frees the old one, so whoever registered
// it with a transport must deregister it first.
// Thread-safety: none; it belongs to the executor thread.
#pragma once

#include <cstdint>
#include <memory>

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
  // Which allocation the block is: a number no earlier block of this arena had (peers that mapped
  // the old block must not be told the new one is the same, even at the same address).
  uint64_t serial() const { return serial_; }
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
  uint64_t serial_ = 0;
};

}  // namespace ferry
