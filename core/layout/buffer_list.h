// BufferList: a layout's buffers (rank, name, bytes) by index, with their ranks and sizes also kept
// as a compact table of 16-byte BufferExtents that a plan shares instead of copying
// (TransferPlan::source_buffers). Copying DeepSeek-V3's 216k source buffers out of 48-byte
// BufferSpecs cost each plan 3% of its time and 3.3 MiB of fresh pages. The table is
// copy-on-write: a list edited while a plan (or a copy of the list) holds its table makes itself
// a new one first, so what the plan holds never changes.
//
// Reading: `list[i]` and iteration give `const BufferSpec&`. Writing goes through the list:
// push_back, SetBytes / GrowBytes, SetName, SetRank, clear. (A Layout's name index sees buffers
// added, not renamed or moved to another rank.) Not thread-safe for mutation; safe to share
// read-only. Copies share the table until one of them is edited.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/base/retained_memory.h"

namespace ferry {

// A named memory region on one rank (a parameter, a fused parameter, a flat FSDP buffer).
struct BufferSpec {
  int rank = 0;
  std::string name;   // unique per rank
  int64_t bytes = 0;  // size; at least the end of every fragment placed in it
};

// A buffer's rank and size: what a plan needs of it.
struct BufferExtent {
  int rank = 0;
  int64_t bytes = 0;
};
using BufferExtents = RetainedVector<BufferExtent>;

// `table` made its holder's own (a copy when another holder shares it: theirs must not change;
// a new one when null), writable. Every table is made by make_shared<BufferExtents>, so one held
// alone may be written through its const pointer.
BufferExtents& OwnExtents(std::shared_ptr<const BufferExtents>& table);

class BufferList {
 public:
  using const_iterator = std::vector<BufferSpec>::const_iterator;

  BufferList() = default;
  BufferList(std::initializer_list<BufferSpec> buffers);  // NOLINT: a list of specs converts

  size_t size() const { return specs_.size(); }
  bool empty() const { return specs_.empty(); }
  const BufferSpec& operator[](size_t i) const { return specs_[i]; }
  const BufferSpec& back() const { return specs_.back(); }
  const_iterator begin() const { return specs_.begin(); }
  const_iterator end() const { return specs_.end(); }

  void reserve(size_t n);
  void push_back(BufferSpec buffer);
  void clear();
  void SetBytes(size_t i, int64_t bytes);
  // Raises buffer i's size to `bytes` if it is smaller.
  void GrowBytes(size_t i, int64_t bytes) {
    if (bytes > specs_[i].bytes) SetBytes(i, bytes);
  }
  void SetName(size_t i, std::string name) { specs_[i].name = std::move(name); }
  void SetRank(size_t i, int rank);

  // One more than the highest rank owning a buffer (0 when empty).
  int NumRanks() const { return num_ranks_; }
  // The ranks and sizes by index, as they are now: later edits of the list leave it unchanged.
  // Never null.
  std::shared_ptr<const BufferExtents> Extents() const;

 private:
  std::vector<BufferSpec> specs_;
  std::shared_ptr<const BufferExtents> extents_;  // null until the first buffer
  int num_ranks_ = 0;
};

}  // namespace ferry
