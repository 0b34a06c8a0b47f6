// BufferList: the specs and their copy-on-write table of extents.
#include "core/layout/buffer_list.h"

#include <algorithm>
#include <utility>

namespace ferry {

BufferList::BufferList(std::initializer_list<BufferSpec> buffers) {
  reserve(buffers.size());
  for (const BufferSpec& b : buffers) push_back(b);
}

BufferExtents& OwnExtents(std::shared_ptr<const BufferExtents>& table) {
  if (table == nullptr) {
    table = std::make_shared<BufferExtents>();
  } else if (table.use_count() > 1) {
    table = std::make_shared<BufferExtents>(*table);
  }
  return const_cast<BufferExtents&>(*table);
}

void BufferList::reserve(size_t n) {
  specs_.reserve(n);
  OwnExtents(extents_).reserve(n);
}

void BufferList::push_back(BufferSpec buffer) {
  OwnExtents(extents_).push_back({buffer.rank, buffer.bytes});
  num_ranks_ = std::max(num_ranks_, buffer.rank + 1);
  specs_.push_back(std::move(buffer));
}

void BufferList::clear() {
  specs_.clear();
  extents_.reset();
  num_ranks_ = 0;
}

void BufferList::SetBytes(size_t i, int64_t bytes) {
  specs_[i].bytes = bytes;
  OwnExtents(extents_)[i].bytes = bytes;
}

void BufferList::SetRank(size_t i, int rank) {
  const int old = specs_[i].rank;
  specs_[i].rank = rank;
  OwnExtents(extents_)[i].rank = rank;
  if (rank + 1 >= num_ranks_) {
    num_ranks_ = rank + 1;
  } else if (old + 1 == num_ranks_) {  // it held the highest rank: count again
    num_ranks_ = 0;
    for (const BufferSpec& b : specs_) num_ranks_ = std::max(num_ranks_, b.rank + 1);
  }
}

std::shared_ptr<const BufferExtents> BufferList::Extents() const {
  if (extents_ != nullptr) return extents_;
  static const std::shared_ptr<const BufferExtents> empty = std::make_shared<BufferExtents>();
  return empty;
}

}  // namespace ferry
