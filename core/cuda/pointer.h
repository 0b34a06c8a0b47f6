// The caller's device memory as ferry meets it: what a pointer handed to ferry as CUDA memory
// really is (which device holds it, how much of its allocation lies at and after it), and waiting
// for the work the caller queued on a device. The library facade checks a caller's CUDA buffers
// with this before any kernel or peer touches them, CUDA IPC export finds an allocation's base
// with it, and a refit waits for the caller's writes to its sources before reading them.
//
// Plain C++ (no CUDA types). Thread-safety: every function is thread-safe. Blocking: each is one
// or two driver queries; the first call in a process initialises CUDA.
#pragma once

#include <array>
#include <cstdint>

#include "core/base/status.h"

namespace ferry::cuda {

// The allocation (cudaMalloc or a caching allocator's block of one) that contains a pointer.
struct Allocation {
  uintptr_t base = 0;
  int64_t bytes = 0;
};

// cuMemGetAddressRange of `ptr` in this process. Fails (InvalidArgument) for a pointer in no
// device allocation of this process: host, unregistered or freed memory.
Result<Allocation> AllocationOf(const void* ptr);

// Device memory at `ptr`: the device ordinal and the bytes from `ptr` to its allocation's end.
struct DevicePointer {
  int device = -1;
  int64_t bytes_from_pointer = 0;
};

// Describes `ptr` when it is ordinary device memory (cudaMalloc, as torch's and CuPy's
// allocators use). Fails naming what it is instead: host or pinned host memory, managed memory,
// memory CUDA does not know, or no CUDA device at all (FailedPrecondition).
Result<DevicePointer> DescribeDevicePointer(const void* ptr);

// The UUID of CUDA device `device` (as nvidia-smi -L shows it, whatever CUDA_VISIBLE_DEVICES
// renumbered): two processes compare these to tell whether they use one GPU. Cached per device
// after the first call.
Result<std::array<uint8_t, 16>> DeviceUuid(int device);

// Waits until all work this process queued on `device`, on every stream, has finished
// (cudaDeviceSynchronize), then restores the calling thread's current device. Blocking.
Status SynchronizeDevice(int device);
// Waits until the work queued on `stream` (a cudaStream_t of `device`; null: that device's legacy
// default stream) has finished, then restores the calling thread's current device. Blocking.
Status SynchronizeStreamOn(int device, void* stream);

}  // namespace ferry::cuda
