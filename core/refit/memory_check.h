// The facade's check of the memory a caller registers for a buffer, before the executor, a
// kernel or a peer's direct read touches it: host memory must be present and large enough; CUDA
// memory must also really be device memory of the device it claims, with the buffer's bytes
// inside one allocation (a peer opens that allocation through CUDA IPC).
//
// Thread-safety: these may be called from any thread. Blocking: for CUDA memory, a driver
// query or two (the first in a process initialises CUDA).
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "core/runtime/transport.h"

namespace ferry {

// The CUDA device ordinal holding ordinary device memory at `address` (for callers whose arrays
// do not say, such as __cuda_array_interface__ objects); the error says what the memory is instead.
Result<int> CudaDeviceOf(const void* address);

// Whether `memory` may back a buffer of `needed` bytes; the error starts with `what` (the
// buffer, e.g. "source buffer 'w'") and says what is wrong with the memory.
Status CheckMemory(const std::string& what, const MemoryDesc& memory, int64_t needed);

}  // namespace ferry
