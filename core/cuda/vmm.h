// cuMem* (VMM) device memory across processes: what a GPU direct read needs to read a peer's
// buffer that lives in virtual-memory-managed allocations (PyTorch's expandable_segments, whose
// tensors may span several 20 MiB mappings, and any allocator built on cuMemCreate/cuMemMap),
// which legacy CUDA IPC (ipc.h) cannot export.
//
// The owner exports each mapping that covers the buffer as a POSIX file descriptor
// (cuMemExportToShareableHandle; the allocation must have been created with that handle type
// requested, as PyTorch does); a reader that obtained those descriptors (pidfd_getfd from the
// owner's verified process: core/runtime/peer_cuda_memory.h) imports them and maps them side by
// side into one reserved range, so the buffer lies at the same offset from the range's start in
// both processes.
//
// Plain C++ (no CUDA types); the driver is reached through the runtime's entry points (no link
// against libcuda). Thread-safety: every function is thread-safe. Blocking: driver calls.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace ferry::cuda {

// One mapping of a span: `bytes` at `offset` from the span's start, exported as `fd`. A plain
// 24-byte record: a reader copies a table of these out of the owner's memory.
struct VmmChunk {
  int64_t offset = 0;
  int64_t bytes = 0;
  int32_t fd = -1;
  int32_t reserved = 0;
};
static_assert(sizeof(VmmChunk) == 24);

// Most mappings one span may have (64 Ki of PyTorch's 20 MiB segments is 1.25 TiB).
inline constexpr int64_t kMaxVmmChunks = int64_t{1} << 16;

// The consecutive mappings that cover a buffer, from the first one's start to the last one's end.
struct VmmSpan {
  uintptr_t base = 0;
  int64_t bytes = 0;
  std::vector<VmmChunk> chunks;  // in address order; their fds belong to the span's holder
};

// Whether `ptr` is device memory of this process that legacy CUDA IPC cannot export because it
// is VMM memory (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE is false).
Result<bool> IsVmmMemory(const void* ptr);

// Bytes mapped from `ptr` on through consecutive mappings, counted up to `limit`: what a VMM
// buffer may use, since one buffer may span several mappings.
Result<int64_t> VmmBytesFrom(const void* ptr, int64_t limit);

// The mappings at the two ends of [ptr, ptr + bytes): from the start of the one holding `ptr` to
// the end of the one holding its last byte (`bytes` > 0). Whether the mappings between are
// consecutive is checked when they are exported.
Result<std::pair<uintptr_t, uintptr_t>> VmmMappingsAround(const void* ptr, int64_t bytes);

// Exports the mappings covering [ptr, ptr + bytes) as POSIX fds (closed with CloseVmmSpan).
// Fails naming the reason when a mapping cannot be exported as a POSIX fd (an allocation created
// without that handle type) or the range is not mapped throughout.
Result<VmmSpan> ExportVmmSpan(const void* ptr, int64_t bytes);
// Closes the fds of an exported span.
void CloseVmmSpan(VmmSpan& span);

// Imports `chunks` (their fds are this process's; closed here whatever happens), which must tile
// [0, span_bytes) in order, and maps them side by side, readable and writable by `device`.
// Returns the start of the mapped span.
Result<void*> MapVmmSpan(const std::vector<VmmChunk>& chunks, int64_t span_bytes, int device);
// Unmaps a span that MapVmmSpan mapped from `chunks` (their offsets and sizes; the fds are not
// used) and frees its address range.
Status UnmapVmmSpan(void* base, const std::vector<VmmChunk>& chunks, int64_t span_bytes);

// Device memory laid out as PyTorch's expandable segments are: `bytes` (rounded up to whole
// chunks) on `device` as chunks of `chunk_bytes` (rounded up to the allocation granularity), each
// its own cuMemCreate allocation with POSIX fd export requested, mapped side by side in one
// reserved range. For tools and tests that check VMM sources and destinations end to end.
struct VmmAllocation {
  void* base = nullptr;
  int64_t bytes = 0;
  int64_t chunk_bytes = 0;
};
Result<VmmAllocation> AllocateVmm(int64_t bytes, int64_t chunk_bytes, int device);
// Unmaps and releases what AllocateVmm made.
Status FreeVmm(const VmmAllocation& allocation);

}  // namespace ferry::cuda
