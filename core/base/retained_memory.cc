// Retained memory: the mappings and the kept blocks behind AllocateRetained.
#include "core/base/retained_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <utility>
#include <vector>

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

// The kept memory: *pieces*, stretches of whole 2 MiB chunks each inside one kernel mapping
// (VMA), and *runs*, stretches of contiguous kept pieces (of one mapping or several). A block takes the
// front of the smallest run that holds it: no move, whatever mappings the run spans, so a block
// freed and asked for again in the same size comes back as it was. When no run holds it, a fresh
// range is mapped and kept pieces are moved into its front with mremap, which hands over their
// pages, filled already, without copying or zeroing them (only the range's tail, if the pieces do
// not cover it, is fresh); mremap moves a range of one mapping only, hence the pieces. So whatever
// was freed, in whatever sizes, serves the next allocations. Never destroyed: vectors freed during
// static destruction still find it.
class Keeper {
 public:
  static Keeper& Get() {
    static Keeper* keeper = new Keeper();
    return *keeper;
  }

  // `size` bytes (a multiple of kHugePage) from the kept pieces as far as they go, the rest of it
  // fresh (all of it when nothing is kept); null when the system has no mappings left.
  void* Take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto fit = runs_by_size_.lower_bound({size, 0}); fit != runs_by_size_.end()) {
      const uintptr_t at = fit->second;
      in_use_[at] = Remove(at, size);
      kept_ -= size;
      return reinterpret_cast<void*>(at);
    }
    void* fresh = MapAligned(size);
    if (fresh == nullptr) return nullptr;
    mapped_ += size;
    const uintptr_t base = reinterpret_cast<uintptr_t>(fresh);
    std::vector<Segment>& segments = in_use_[base];
    size_t filled = 0;
    // The largest runs first, each piece by piece in address order: pieces that lay side by side
    // land side by side.
    while (filled < size && !runs_by_size_.empty()) {
      const uintptr_t at = std::prev(runs_by_size_.end())->second;
      const Piece piece = pieces_.at(at);  // a run starts with a piece
      const size_t moved = std::min(piece.size, size - filled);
      void* to = mremap(reinterpret_cast<void*>(at), moved, moved, MREMAP_MAYMOVE | MREMAP_FIXED,
                        reinterpret_cast<void*>(base + filled));
      Remove(at, to == MAP_FAILED ? piece.size : moved);
      if (to == MAP_FAILED) {
        // Not one mapping after all: give the piece back to the system and stop moving.
        munmap(reinterpret_cast<void*>(at), piece.size);
        kept_ -= piece.size;
        mapped_ -= piece.size;
        break;
      }
      kept_ -= moved;
      mapped_ -= moved;                              // counted in the new range now
      segments.push_back({moved, next_mapping_++});  // moved pages are a mapping of their own
      filled += moved;
    }
    if (filled < size) segments.push_back({size - filled, next_mapping_++});
    return fresh;
  }

  // Takes back a block Take returned: its pieces are kept while the limit allows, else
  // unmapped.
  void Give(void* block) {
    std::vector<std::pair<uintptr_t, size_t>> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = in_use_.find(reinterpret_cast<uintptr_t>(block));
      if (it == in_use_.end()) return;  // not a block of ours: nothing to do
      uintptr_t at = it->first;
      for (const Segment& segment : it->second) {
        if (kept_ + segment.size <= limit_) {
          Insert(at, segment);
          kept_ += segment.size;
        } else {
          released.emplace_back(at, segment.size);
          mapped_ -= segment.size;
        }
        at += segment.size;
      }
      in_use_.erase(it);
    }
    for (const auto& [at, size] : released) munmap(reinterpret_cast<void*>(at), size);
  }
  size_t Kept() {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_;
  }
  size_t Mapped() {
    std::lock_guard<std::mutex> lock(mutex_);
    return mapped_;
  }
  size_t Limit() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }
  // Sets the limit and returns kept runs to the system, the largest first, until the bytes kept
  // are at most `keep` (the limit, or 0 to release all).
  void SetLimit(size_t limit, size_t keep) {
    std::vector<std::pair<uintptr_t, size_t>> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = limit;
      while (kept_ > keep) {
        const auto [size, at] = *std::prev(runs_by_size_.end());
        Remove(at, size);
        kept_ -= size;
        mapped_ -= size;
        released.emplace_back(at, size);
      }
    }
    for (const auto& [at, size] : released) munmap(reinterpret_cast<void*>(at), size);
  }

 private:
  // A stretch of kept chunks, and which mapping it lies in: pieces of one mapping that meet are
  // one piece again; pieces of two never are.
  struct Piece {
    size_t size = 0;
    uint64_t mapping = 0;
  };
  // A part of a block in use: a piece it was made of, in address order.
  using Segment = Piece;

  Keeper() : limit_(LimitFromEnvironment()) {}

  // Keeps `piece` at `at`: joined with its neighbours of the same mapping into one piece, and with
  // all the kept pieces it meets into one run (kept_ unchanged).
  void Insert(uintptr_t at, Piece piece) {
    AddRun(at, piece.size);
    if (auto next = pieces_.find(at + piece.size);
        next != pieces_.end() && next->second.mapping == piece.mapping) {
      piece.size += next->second.size;
      pieces_.erase(next);
    }
    if (auto next = pieces_.lower_bound(at); next != pieces_.begin()) {
      const auto before = std::prev(next);
      if (before->first + before->second.size == at && before->second.mapping == piece.mapping) {
        at = before->first;
        piece.size += before->second.size;
        pieces_.erase(before);
      }
    }
    pieces_[at] = piece;
  }
  // Adds [at, at + size) to the runs, joined with the runs it meets.
  void AddRun(uintptr_t at, size_t size) {
    if (auto next = runs_.find(at + size); next != runs_.end()) size += EraseRun(next);
    if (auto next = runs_.lower_bound(at); next != runs_.begin()) {
      const auto before = std::prev(next);
      if (before->first + before->second == at) {
        at = before->first;
        size += EraseRun(before);
      }
    }
    PutRun(at, size);
  }
  // The two indexes of the runs, kept in step: a run in, a run out (returning its size).
  void PutRun(uintptr_t at, size_t size) {
    runs_[at] = size;
    runs_by_size_.insert({size, at});
  }
  size_t EraseRun(std::map<uintptr_t, size_t>::iterator run) {
    const size_t size = run->second;
    runs_by_size_.erase({size, run->first});
    runs_.erase(run);
    return size;
  }
  // Takes [at, at + size), which starts a piece and lies in one run, out of the kept pieces and
  // runs, and returns its parts by mapping (kept_ unchanged).
  std::vector<Segment> Remove(uintptr_t at, size_t size) {
    // The run: cut [at, at + size) out of it.
    auto run = std::prev(runs_.upper_bound(at));
    const uintptr_t run_at = run->first;
    const size_t run_size = EraseRun(run);
    if (at > run_at) PutRun(run_at, at - run_at);
    if (at + size < run_at + run_size) PutRun(at + size, run_at + run_size - (at + size));
    // The pieces: whole ones, and the front of the last.
    std::vector<Segment> parts;
    uintptr_t cursor = at;
    while (cursor < at + size) {
      auto it = pieces_.find(cursor);
      const Piece piece = it->second;
      pieces_.erase(it);
      const size_t taken = std::min(piece.size, at + size - cursor);
      parts.push_back({taken, piece.mapping});
      if (taken < piece.size) pieces_[cursor + taken] = {piece.size - taken, piece.mapping};
      cursor += taken;
    }
    return parts;
  }

  std::mutex mutex_;
  std::map<uintptr_t, Piece> pieces_;                    // kept, by address
  std::map<uintptr_t, size_t> runs_;                     // kept, contiguous: address -> size
  std::set<std::pair<size_t, uintptr_t>> runs_by_size_;  // (size, address)
  std::map<uintptr_t, std::vector<Segment>> in_use_;     // blocks handed out: their parts
  uint64_t next_mapping_ = 0;
  size_t kept_ = 0;    // bytes in pieces_
  size_t mapped_ = 0;  // bytes in pieces_ and in_use_
  size_t limit_;
};

}  // namespace

void* AllocateRetained(size_t bytes) {
  if (kPassThrough || bytes < kRetainedMinBytes) return ::operator new(bytes);
  const size_t size = MappedSize(bytes);
  Keeper& keeper = Keeper::Get();
  if (void* block = keeper.Take(size)) return block;
  // Out of mappings: what is kept goes back first.
  ReleaseRetained();
  if (void* block = keeper.Take(size)) return block;
  throw std::bad_alloc();
}

void FreeRetained(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  if (kPassThrough || bytes < kRetainedMinBytes) {
    ::operator delete(block);
    return;
  }
  Keeper::Get().Give(block);
}

size_t RetainedBytes() { return Keeper::Get().Kept(); }
size_t RetainedMappedBytes() { return kPassThrough ? 0 : Keeper::Get().Mapped(); }
void SetRetainedLimit(size_t bytes) { Keeper::Get().SetLimit(bytes, bytes); }
size_t RetainedLimit() { return Keeper::Get().Limit(); }
void ReleaseRetained() {
  Keeper& keeper = Keeper::Get();
  keeper.SetLimit(keeper.Limit(), 0);
}
bool RetainsMemory() { return !kPassThrough; }

}  // namespace ferry
