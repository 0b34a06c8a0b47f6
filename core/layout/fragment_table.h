// FragmentTable: a layout's fragments, stored compactly. A Fragment value carries 8-dim boxes and
// strides (224 bytes); a refit's layouts hold hundreds of thousands of fragments of 1 to 3 dims,
// and the planner reads every one of them, so the table keeps a 96-byte record per fragment:
// tensor, rank, buffer, ndim, byte offset, and the lo, hi and stride values of up to 3 dims inline
// (more dims keep theirs in a pool the record points to).
//
// Reading: `table[i]` (and iteration) builds a Fragment value (const: edit with Set); the field
// accessors (Tensor, Lo, Strides, ...) read the stored values without building one. Writing:
// push_back, Set, and the in-place setters. Pointers from Lo/Hi/Strides stay valid until the table
// is next written. Values past a fragment's ndim are not kept (they read 0), nor is an ndim outside
// [0, kMaxDims] given more than kMaxDims values (it is kept as is for the validator to report).
//
// A plain value type: not thread-safe for mutation, safe to share read-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "core/layout/box.h"

namespace ferry {

struct Location {
  int rank = 0;
  int buffer = 0;           // index into Layout::buffers; buffers[buffer].rank == rank
  int64_t byte_offset = 0;  // of the box's first element within the buffer
  std::array<int64_t, kMaxDims> strides{};  // element strides, one per box dim, all > 0
};

struct Fragment {
  int tensor = 0;  // index into Layout::tensors
  Box box;         // region of the logical tensor
  Location loc;

  int64_t NumElements() const { return box.Volume(); }
};

// One fragment's fields, read in place from a FragmentTable (FragmentTable::View). The arrays hold
// FragmentTable::Count(ndim) values each and stay valid until the table is next written.
struct FragmentView {
  int tensor = 0;
  int ndim = 0;
  int rank = 0;
  int buffer = 0;
  int64_t byte_offset = 0;
  const int64_t* lo = nullptr;
  const int64_t* hi = nullptr;
  const int64_t* strides = nullptr;
};

class FragmentTable {
 public:
  // Iterates over Fragment values (built on dereference).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Fragment;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = const Fragment;
    Iterator() = default;
    Iterator(const FragmentTable* table, size_t index) : table_(table), index_(index) {}
    const Fragment operator*() const { return (*table_)[index_]; }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++index_;
      return old;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.index_ == b.index_; }
    friend bool operator!=(const Iterator& a, const Iterator& b) { return a.index_ != b.index_; }

   private:
    const FragmentTable* table_ = nullptr;
    size_t index_ = 0;
  };

  FragmentTable() = default;
  FragmentTable(const std::vector<Fragment>& fragments) { Assign(fragments); }  // NOLINT

  size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }
  // A copy, const so that `table[i].box = ...` (which would change only the copy) does not compile:
  // write with Set.
  const Fragment operator[](size_t i) const;
  const Fragment front() const { return (*this)[0]; }
  const Fragment back() const { return (*this)[size() - 1]; }
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }
  std::vector<Fragment> ToVector() const;

  // Appends a fragment.
  void push_back(const Fragment& f);
  // Appends a fragment with these fields; returns its lo, hi and strides (Count(ndim) each, in
  // that order) for the caller to fill.
  int64_t* Append(int tensor, int ndim, int rank, int buffer, int64_t byte_offset) {
    Record& r = records_.emplace_back();
    r.tensor = tensor;
    r.rank = rank;
    r.buffer = buffer;
    r.ndim = ndim;
    r.byte_offset = byte_offset;
    PlaceValues(r);
    return MutableValuesOf(r);
  }
  // Replaces fragment `i` (its values are rewritten in place when they fit, else appended).
  void Set(size_t i, const Fragment& f);
  // Edits fragment `i` through a copy: `edit(fragment)` changes it, then Set stores it.
  template <typename EditFn>
  void Edit(size_t i, EditFn&& edit) {
    Fragment f = (*this)[i];
    edit(f);
    Set(i, f);
  }
  // Replaces every fragment with `fragments`, in order.
  void Assign(const std::vector<Fragment>& fragments);
  // Room for `n` fragments (their records) without reallocating.
  void reserve(size_t n) { records_.reserve(n); }
  void clear() {
    records_.clear();
    pool_.clear();
  }
  // Drops fragments past the first `n` (n <= size()).
  void Truncate(size_t n);
  void pop_back() { Truncate(size() - 1); }
  // Removes fragment `i`; later fragments move down by one.
  void Erase(size_t i);
  // Fragment `to` becomes a copy of fragment `from` (of more than 3 dims, sharing its pooled
  // values: write neither in place afterwards unless one of them is dropped).
  void CopyWithin(size_t to, size_t from) { records_[to] = records_[from]; }

  // Fields of fragment `i`, read in place.
  int Tensor(size_t i) const { return records_[i].tensor; }
  int Ndim(size_t i) const { return records_[i].ndim; }
  int Rank(size_t i) const { return records_[i].rank; }
  int Buffer(size_t i) const { return records_[i].buffer; }
  int64_t ByteOffset(size_t i) const { return records_[i].byte_offset; }
  // Lo, Hi and Strides of fragment `i`: Ndim(i) values each (clamped to [0, kMaxDims]).
  const int64_t* Lo(size_t i) const { return ValuesOf(records_[i]); }
  const int64_t* Hi(size_t i) const { return Lo(i) + Count(records_[i].ndim); }
  const int64_t* Strides(size_t i) const { return Lo(i) + 2 * Count(records_[i].ndim); }
  FragmentView View(size_t i) const {
    const Record& r = records_[i];
    const int n = Count(r.ndim);
    const int64_t* v = ValuesOf(r);
    return {r.tensor, r.ndim, r.rank, r.buffer, r.byte_offset, v, v + n, v + 2 * n};
  }
  // Lo, hi and strides of fragment `i`, which has `ndim` dims (its Ndim): their address then needs
  // no read of the record first (for ndim <= 3), so a cache miss on the record is waited for once.
  const int64_t* ValuesOf(size_t i, int ndim) const { return ValuesOf(records_[i], ndim); }
  Box BoxOf(size_t i) const;
  // Elements in fragment `i`'s box (0 when empty), as Box::Volume.
  int64_t Volume(size_t i) const;
  // Whether fragments `i` and `j` have equal boxes.
  bool SameBox(size_t i, size_t j) const;

  // In-place edits of fragment `i`.
  void SetTensor(size_t i, int tensor) { records_[i].tensor = tensor; }
  void SetByteOffset(size_t i, int64_t offset) { records_[i].byte_offset = offset; }
  int64_t* MutableLo(size_t i) { return MutableValuesOf(records_[i]); }
  int64_t* MutableHi(size_t i) { return MutableLo(i) + Count(records_[i].ndim); }
  int64_t* MutableStrides(size_t i) { return MutableLo(i) + 2 * Count(records_[i].ndim); }

  static int Count(int ndim) { return std::clamp(ndim, 0, kMaxDims); }

 private:
  static constexpr int kInlineDims = 3;
  static bool Inline(int ndim) { return ndim <= kInlineDims; }
  struct Record {
    int tensor = 0;
    int rank = 0;
    int buffer = 0;
    int ndim = 0;
    int64_t byte_offset = 0;
    // Lo, then hi, then strides, Count(ndim) values each: here when Inline(ndim), else in pool_
    // from index values[0].
    int64_t values[3 * kInlineDims];
  };
  static_assert(sizeof(Record) == 96);
  // Where the values of `r`, a record of `ndim` dims, are.
  const int64_t* ValuesOf(const Record& r, int ndim) const {
    return Inline(ndim) ? r.values : pool_.data() + r.values[0];
  }
  const int64_t* ValuesOf(const Record& r) const { return ValuesOf(r, r.ndim); }
  int64_t* MutableValuesOf(Record& r) { return const_cast<int64_t*>(ValuesOf(r)); }
  // Gives `r` (its ndim set) room for its values in the pool when they do not fit inline.
  void PlaceValues(Record& r) {
    if (Inline(r.ndim)) return;
    r.values[0] = static_cast<int64_t>(pool_.size());
    pool_.resize(pool_.size() + 3 * static_cast<size_t>(Count(r.ndim)));
  }

  void Write(Record& r, const Fragment& f, bool in_place);

  std::vector<Record> records_;
  std::vector<int64_t> pool_;  // values of fragments of more than kInlineDims dims
};

}  // namespace ferry
