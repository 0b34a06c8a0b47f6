// A textbook device copy kernel for the multi-process ceilings (ipc_copy_ceiling): a grid-stride
// loop of 16-byte words, a few thousand threads per SM, nothing of ferry's batched kernel (no
// descriptors, no per-block setup), so that the ceiling a GPU direct read is compared against does
// not move when ferry's kernel does. Plain C++ header; launch is non-blocking on `stream`.
#pragma once

#include <cstdint>

#include "core/base/status.h"

namespace ferry::cuda {

// Copies `bytes` (a multiple of 16, both pointers 16-byte aligned) from `src` to `dst`, device
// pointers of the current device (a peer's IPC mapping included).
Status LaunchPlainCopy(void* dst, const void* src, int64_t bytes, void* stream);

}  // namespace ferry::cuda
