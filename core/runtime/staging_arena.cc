// StagingArena: see staging_arena.h.
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
  ++serial_;
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
  ++serial_;
  pinned_ = false;
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(device));
  FERRY_ASSIGN_OR_RETURN(void* p, cuda::DeviceAlloc(bytes));
  data_ = static_cast<char*>(p);
  bytes_ = bytes;
  device_ = device;
  return Status::Ok();
}

}  // namespace ferry
