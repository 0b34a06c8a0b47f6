// StagingArena and ArenaAllocator: see staging_arena.h.
#include "core/runtime/staging_arena.h"

#include <algorithm>
#include <iterator>

#include "core/cuda/batched_copy.h"
#include "core/cuda/copy_stream.h"

namespace ferry {

StagingArena::~StagingArena() { Free(); }

void StagingArena::Free() {
  if (data_ != nullptr) {
    if (device_ >= 0) {
      (void)cuda::DeviceFree(data_);
    } else if (pinned_) {
      (void)cuda::PinnedFree(data_);
    } else {
      delete[] data_;
    }
  }
  data_ = nullptr;
  bytes_ = 0;
  device_ = -1;
}

Status StagingArena::Reallocate(int64_t bytes, bool pinned) {
  Free();
  pinned_ = pinned;
  if (pinned) {
    FERRY_ASSIGN_OR_RETURN(void* p, cuda::PinnedAlloc(bytes));
    data_ = static_cast<char*>(p);
  } else {
    data_ = new char[static_cast<size_t>(std::max<int64_t>(bytes, 1))];
  }
  bytes_ = bytes;
  return Status::Ok();
}

Status StagingArena::ReallocateOnDevice(int64_t bytes, int device) {
  Free();
  pinned_ = false;
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(device));
  FERRY_ASSIGN_OR_RETURN(void* p, cuda::DeviceAlloc(bytes));
  data_ = static_cast<char*>(p);
  bytes_ = bytes;
  device_ = device;
  return Status::Ok();
}

void ArenaAllocator::Reset(int64_t capacity) {
  free_.clear();
  used_.clear();
  in_use_ = 0;
  free_[0] = capacity;
}

int64_t ArenaAllocator::Allocate(int64_t bytes) {
  bytes = Granted(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    int64_t offset = it->first, size = it->second;
    free_.erase(it);
    if (size > bytes) free_[offset + bytes] = size - bytes;
    used_[offset] = bytes;
    in_use_ += bytes;
    return offset;
  }
  return -1;
}

void ArenaAllocator::Free(int64_t offset) {
  int64_t bytes = used_.at(offset);
  used_.erase(offset);
  in_use_ -= bytes;
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

}  // namespace ferry
