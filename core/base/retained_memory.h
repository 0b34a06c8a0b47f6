// Retained memory: large blocks on 2 MiB pages, kept for reuse after they are freed.
//
// A plan of a large refit is written into ~100 MiB of large vectors (ops, copy pairs, per-fragment
// scratch). glibc maps allocations this large anew each time and unmaps them when freed, so every
// plan made in a process pays the kernel again for mapping and zeroing them: a fifth of
// DeepSeek-V3's planning time when planned over and over. Blocks of at least kRetainedMinBytes are
// mapped here instead, 2 MiB-aligned with transparent huge pages advised, and what is freed is
// kept (up to a limit on the bytes kept) in runs of whole 2 MiB pages for the next allocations,
// whatever their sizes: a block takes the front of the smallest kept run that holds it (a run may
// span several mappings: a block freed and asked for again comes back where it was); a larger
// one than any run maps a fresh range and has kept pages moved into its front with mremap(2),
// which hands them over as they are (filled already: not copied, not zeroed again). So a process
// that plans again reuses warm memory, and even its first plan reuses what its own earlier passes
// (and the building of its layouts, whose fragment tables live here too) have freed.
//
// The limit is 256 MiB unless the environment variable FERRY_RETAINED_MEMORY_MIB (read once, at
// the first use) or SetRetainedLimit says otherwise; 0 keeps nothing. Under AddressSanitizer every
// block comes from operator new, so that the sanitizer still sees overflows and uses after free.
// Contents of a block handed out again are whatever was last written there.
//
// Thread-safe: one mutex guards the kept pieces (allocations this large are few).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ferry {

inline constexpr size_t kRetainedMinBytes = size_t{1} << 20;

// `bytes` of memory (aligned for any type), for kRetainedMinBytes or more: from the kept pieces
// as far as they go, the rest freshly mapped; operator new below that. Throws std::bad_alloc when
// none is left.
void* AllocateRetained(size_t bytes);
// Frees what AllocateRetained(bytes) returned, keeping a large block's pages while the limit
// allows.
void FreeRetained(void* block, size_t bytes) noexcept;

// Bytes of freed blocks kept for reuse now.
size_t RetainedBytes();
// Bytes mapped for blocks of kRetainedMinBytes or more now: in use plus kept (0 under
// AddressSanitizer).
size_t RetainedMappedBytes();
// Sets the limit on the bytes kept, returning blocks over it to the system.
void SetRetainedLimit(size_t bytes);
size_t RetainedLimit();
// Returns every kept block to the system.
void ReleaseRetained();
// False under AddressSanitizer, where every block comes from operator new and none is kept.
bool RetainsMemory();

// A std::allocator replacement drawing on AllocateRetained: a vector of it reuses the blocks of
// earlier vectors once they are freed. Stateless; all instances are equal.
template <typename T>
struct RetainedAllocator {
  using value_type = T;
  RetainedAllocator() = default;
  template <typename U>
  RetainedAllocator(const RetainedAllocator<U>&) noexcept {}  // NOLINT: rebinding converts
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(AllocateRetained(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { FreeRetained(p, n * sizeof(T)); }
  template <typename U>
  friend bool operator==(const RetainedAllocator&, const RetainedAllocator<U>&) {
    return true;
  }
};

template <typename T>
using RetainedVector = std::vector<T, RetainedAllocator<T>>;

}  // namespace ferry
