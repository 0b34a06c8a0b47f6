// BufferList: a layout's buffers (rank, name, bytes) by index.
//
// Reading: `list[i]` and iteration give `const BufferSpec&`. Writing goes through the list:
// push_back, SetBytes / GrowBytes, SetName, SetRank, clear, so that the rank count (NumRanks)
// stays current. (A Layout's name index sees buffers added, not renamed or moved to another rank.)
// A plain value type: not thread-safe for mutation, safe to share read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

// A named memory region on one rank (a parameter, a fused parameter, a flat FSDP buffer).
struct BufferSpec {
  int rank = 0;
  std::string name;   // unique per rank
  int64_t bytes = 0;  // size; at least the end of every fragment placed in it
};

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

  void reserve(size_t n) { specs_.reserve(n); }
  void push_back(BufferSpec buffer);
  void clear();
  void SetBytes(size_t i, int64_t bytes) { specs_[i].bytes = bytes; }
  // Raises buffer i's size to `bytes` if it is smaller.
  void GrowBytes(size_t i, int64_t bytes) {
    if (bytes > specs_[i].bytes) SetBytes(i, bytes);
  }
  void SetName(size_t i, std::string name) { specs_[i].name = std::move(name); }
  void SetRank(size_t i, int rank);

  // One more than the highest rank owning a buffer (0 when empty).
  int NumRanks() const { return num_ranks_; }

 private:
  std::vector<BufferSpec> specs_;
  int num_ranks_ = 0;
};

}  // namespace ferry
