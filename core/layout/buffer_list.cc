// BufferList: the specs and their rank count.
#include "core/layout/buffer_list.h"

#include <algorithm>
#include <utility>

namespace ferry {

BufferList::BufferList(std::initializer_list<BufferSpec> buffers) {
  reserve(buffers.size());
  for (const BufferSpec& b : buffers) push_back(b);
}

void BufferList::push_back(BufferSpec buffer) {
  num_ranks_ = std::max(num_ranks_, buffer.rank + 1);
  specs_.push_back(std::move(buffer));
}

void BufferList::clear() {
  specs_.clear();
  num_ranks_ = 0;
}

void BufferList::SetRank(size_t i, int rank) {
  const int old = specs_[i].rank;
  specs_[i].rank = rank;
  if (rank + 1 >= num_ranks_) {
    num_ranks_ = rank + 1;
  } else if (old + 1 == num_ranks_) {  // it held the highest rank: count again
    num_ranks_ = 0;
    for (const BufferSpec& b : specs_) num_ranks_ = std::max(num_ranks_, b.rank + 1);
  }
}

}  // namespace ferry
