// Retained memory: the mappings and the kept blocks behind AllocateRetained.
#include "core/base/retained_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

namespace ferry {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPassThrough = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kPassThrough = true;
#else
constexpr bool kPassThrough = false;
#endif
#else
constexpr bool kPassThrough = false;
#endif

constexpr size_t kHugePage = size_t{2} << 20;

size_t MappedSize(size_t bytes) { return (bytes + kHugePage - 1) & ~(kHugePage - 1); }

// A fresh mapping of `size` bytes (a multiple of kHugePage) at a kHugePage boundary, huge pages
// advised; null when the system has none.
void* MapAligned(size_t size) {
  void* raw =
      mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePage;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<void*>(aligned);
}

// FERRY_RETAINED_MEMORY_MIB when it is a number, else 256 MiB.
size_t LimitFromEnvironment() {
  constexpr size_t kDefaultLimit = size_t{256} << 20;
  const char* text = std::getenv("FERRY_RETAINED_MEMORY_MIB");
  if (text == nullptr || *text == '\0') return kDefaultLimit;
  char* end = nullptr;
  const unsigned long long mib = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') return kDefaultLimit;
  return static_cast<size_t>(mib) << 20;
}

// The kept blocks by mapped size. Never destroyed: vectors freed during static destruction still
// find it.
class Keeper {
 public:
  static Keeper& Get() {
    static Keeper* keeper = new Keeper();
    return *keeper;
  }

  void* Take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest kept block that fits and is at most twice the size asked for.
    auto it = blocks_.lower_bound(size);
    if (it == blocks_.end() || it->first > 2 * size) return nullptr;
    void* block = it->second;
    kept_ -= it->first;
    sizes_[block] = it->first;
    blocks_.erase(it);
    return block;
  }
  // Takes back a freed block, mapped with `size` bytes unless it was taken from the kept blocks
  // (then it may be larger than its allocation asked for): kept while the limit allows, else
  // unmapped.
  void Give(void* block, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = sizes_.find(block); it != sizes_.end()) {
        size = it->second;
        sizes_.erase(it);
      }
      if (kept_ + size <= limit_) {
        blocks_.emplace(size, block);
        kept_ += size;
        return;
      }
    }
    munmap(block, size);
  }
  size_t Kept() {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_;
  }
  size_t Limit() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }
  // Sets the limit and returns kept blocks to the system, the largest first, until the bytes kept
  // are at most `keep` (the limit, or 0 to release all).
  void SetLimit(size_t limit, size_t keep) {
    std::multimap<size_t, void*> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = limit;
      while (kept_ > keep) {
        auto last = std::prev(blocks_.end());
        kept_ -= last->first;
        released.insert(*last);
        blocks_.erase(last);
      }
    }
    for (const auto& [size, block] : released) munmap(block, size);
  }

 private:
  Keeper() : limit_(LimitFromEnvironment()) {}

  std::mutex mutex_;
  std::multimap<size_t, void*> blocks_;  // kept: mapped size -> block
  std::map<void*, size_t> sizes_;        // in use, taken from the kept blocks: block -> size
  size_t kept_ = 0;
  size_t limit_;
};

}  // namespace

void* AllocateRetained(size_t bytes) {
  if (kPassThrough || bytes < kRetainedMinBytes) return ::operator new(bytes);
  const size_t size = MappedSize(bytes);
  Keeper& keeper = Keeper::Get();
  if (void* block = keeper.Take(size)) return block;
  void* block = MapAligned(size);
  if (block == nullptr) {
    // Out of mappings: what is kept goes back first.
    ReleaseRetained();
    block = MapAligned(size);
    if (block == nullptr) throw std::bad_alloc();
  }
  return block;
}

void FreeRetained(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  if (kPassThrough || bytes < kRetainedMinBytes) {
    ::operator delete(block);
    return;
  }
  Keeper::Get().Give(block, MappedSize(bytes));
}

size_t RetainedBytes() { return Keeper::Get().Kept(); }
void SetRetainedLimit(size_t bytes) { Keeper::Get().SetLimit(bytes, bytes); }
size_t RetainedLimit() { return Keeper::Get().Limit(); }
void ReleaseRetained() {
  Keeper& keeper = Keeper::Get();
  keeper.SetLimit(keeper.Limit(), 0);
}
bool RetainsMemory() { return !kPassThrough; }

}  // namespace ferry
