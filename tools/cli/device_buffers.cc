// DeviceBuffers: a rank's buffers of one side in one CUDA allocation.
#include "tools/cli/device_buffers.h"

#include <algorithm>

#include "core/cuda/batched_copy.h"
#include "core/cuda/copy_stream.h"

namespace ferry::cli {

Result<std::unique_ptr<DeviceBuffers>> DeviceBuffers::Allocate(const BufferList& specs, int rank,
                                                               int device) {
  std::unique_ptr<DeviceBuffers> buffers(new DeviceBuffers);
  buffers->device_ = device;
  buffers->offsets_.assign(specs.size(), -1);
  buffers->bytes_.assign(specs.size(), 0);
  int64_t size = 0;
  for (size_t b = 0; b < specs.size(); ++b) {
    if (specs[b].rank != rank) continue;
    buffers->offsets_[b] = size;
    buffers->bytes_[b] = specs[b].bytes;
    size += (std::max<int64_t>(specs[b].bytes, 1) + 255) / 256 * 256;
    buffers->total_ += specs[b].bytes;
  }
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(device));
  FERRY_ASSIGN_OR_RETURN(void* block, cuda::DeviceAlloc(size));
  buffers->block_ = static_cast<char*>(block);
  buffers->block_bytes_ = size;
  return buffers;
}

DeviceBuffers::~DeviceBuffers() {
  if (block_ != nullptr) (void)cuda::DeviceFree(block_);
}

MemoryDesc DeviceBuffers::Desc(size_t buffer) const {
  return MemoryDesc{block_ + offsets_[buffer], bytes_[buffer], MemoryKind::kCuda, device_};
}

Status DeviceBuffers::Zero() { return cuda::ZeroDevice(block_, block_bytes_); }

Status DeviceBuffers::Upload(const HostBuffers& mirror) {
  for (size_t b = 0; b < offsets_.size(); ++b) {
    if (offsets_[b] < 0) continue;
    FERRY_RETURN_IF_ERROR(cuda::CopyToDevice(block_ + offsets_[b], mirror.pointers()[b], bytes_[b]));
  }
  return Status::Ok();
}

Status DeviceBuffers::Download(HostBuffers& mirror) const {
  for (size_t b = 0; b < offsets_.size(); ++b) {
    if (offsets_[b] < 0) continue;
    FERRY_RETURN_IF_ERROR(cuda::CopyToHost(mirror.pointers()[b], block_ + offsets_[b], bytes_[b]));
  }
  return Status::Ok();
}

}  // namespace ferry::cli
