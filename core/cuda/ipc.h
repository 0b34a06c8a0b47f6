// CUDA IPC: sharing device memory between processes of one machine (legacy cudaIpc* handles).
// A process exports a device pointer as the handle of its allocation plus the pointer's offset in
// it; a peer process opens the handle once (OpenIpcMemory, reference-counted per process because
// the driver maps a handle only once per context) and reads the memory with its own kernels.
//
// Plain C++ (no CUDA types). Thread-safety: every function is thread-safe.
#pragma once

#include <array>
#include <cstdint>

#include "core/base/status.h"

namespace ferry::cuda {

inline constexpr int kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;

// What a peer needs to reach a device pointer: its allocation's handle, the allocation's size and
// the pointer's offset in it.
struct IpcExport {
  IpcHandle handle{};
  int64_t allocation_bytes = 0;
  int64_t offset = 0;
};

// Exports `ptr` (memory from cudaMalloc on the current device, or inside such an allocation).
// Fails for host, managed or VMM memory.
Result<IpcExport> ExportIpcMemory(const void* ptr);

// Opens `handle` on `device` (a peer's allocation) and returns its base in this process; a handle
// already open in this process returns the same base and counts one more user. Blocking.
Result<void*> OpenIpcMemory(const IpcHandle& handle, int device);
// One user fewer of the allocation opened at `base`; the last closes it.
Status CloseIpcMemory(void* base);

}  // namespace ferry::cuda
