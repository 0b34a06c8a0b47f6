// Large planner vectors on 2 MiB pages. A plan of a large refit writes hundreds of MiB of fresh
// memory (ops, copy pairs, scratch); at 4 KiB per page fault that is tens of thousands of faults,
// several microseconds each in a VM. Asking the kernel for transparent huge pages under a vector's
// reserved capacity before its first touch cuts that to a few hundred. Only a hint: where it is
// refused (THP disabled, not Linux) nothing changes but the speed. (A RetainedVector's large
// blocks are advised already; the advice is harmless twice.) Also ScratchVector, for scratch that
// is written before it is read and so need not be zeroed first, on retained memory.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/base/retained_memory.h"

namespace ferry {

// Advises huge pages for the 2 MiB-aligned part of `v`'s capacity.
template <typename T, typename Allocator>
void AdviseHugePages(const std::vector<T, Allocator>& v) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t end = begin + v.capacity() * sizeof(T);
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = end & ~(kHuge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)v;
#endif
}

// Reserves `n` elements of `v` on huge pages (see above).
template <typename T, typename Allocator>
void ReserveFresh(std::vector<T, Allocator>& v, size_t n) {
  v.reserve(n);
  AdviseHugePages(v);
}

// Sizes `v` to `n` value-initialized elements (left unwritten in a ScratchVector), asking for huge
// pages before the first touch.
template <typename T, typename Allocator>
void GrowFresh(std::vector<T, Allocator>& v, size_t n) {
  ReserveFresh(v, n);
  v.resize(n);
}

// A RetainedAllocator whose construct() without arguments default-initializes: resize() then leaves
// trivial elements unwritten, so a pass that writes every element it reads writes the memory once
// (besides the kernel's zeroing of fresh pages) instead of after a pass of zeros. 14 MB of scratch
// for DeepSeek-V3's destination fragments were written twice before.
template <typename T>
struct UninitializedAllocator : RetainedAllocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}  // NOLINT: rebinding
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A vector of scratch values that are written before they are read.
template <typename T>
using ScratchVector = std::vector<T, UninitializedAllocator<T>>;

}  // namespace ferry
