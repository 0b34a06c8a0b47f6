// DeviceBuffers: a rank's buffers of one side in one CUDA allocation.
#include "tools/cli/device_buffers.h"

#include "core/cuda/batched_copy.h"
#include "core/cuda/copy_stream.h"

namespace ferry::cli {

Result<std::unique_ptr<DeviceBuffers>> DeviceBuffers::Allocate(const BufferList& specs, int rank,
                                                               int device) {
  std::unique_ptr<DeviceBuffers> buffers(new DeviceBuffers);
  buffers->device_ = device;
  buffers->carving_ = BufferCarving::Of(specs, rank);
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(device));
  FERRY_ASSIGN_OR_RETURN(void* block, cuda::DeviceAlloc(buffers->carving_.block_bytes));
  buffers->block_ = static_cast<char*>(block);
  return buffers;
}

DeviceBuffers::~DeviceBuffers() {
  if (block_ != nullptr) (void)cuda::DeviceFree(block_);
}

MemoryDesc DeviceBuffers::Desc(size_t buffer) const {
  return MemoryDesc{block_ + carving_.offsets[buffer], carving_.bytes[buffer], MemoryKind::kCuda, device_};
}

std::vector<char*> DeviceBuffers::pointers() const {
  std::vector<char*> out(carving_.offsets.size(), nullptr);
  for (size_t b = 0; b < out.size(); ++b) {
    if (carving_.offsets[b] >= 0) out[b] = block_ + carving_.offsets[b];
  }
  return out;
}

Status DeviceBuffers::Zero() { return cuda::ZeroDevice(block_, carving_.block_bytes); }

Status DeviceBuffers::Upload(const HostBuffers& mirror) {
  for (size_t b = 0; b < carving_.offsets.size(); ++b) {
    if (carving_.offsets[b] < 0) continue;
    FERRY_RETURN_IF_ERROR(
        cuda::CopyToDevice(block_ + carving_.offsets[b], mirror.pointers()[b], carving_.bytes[b]));
  }
  return Status::Ok();
}

Status DeviceBuffers::Download(HostBuffers& mirror) const {
  for (size_t b = 0; b < carving_.offsets.size(); ++b) {
    if (carving_.offsets[b] < 0) continue;
    FERRY_RETURN_IF_ERROR(
        cuda::CopyToHost(mirror.pointers()[b], block_ + carving_.offsets[b], carving_.bytes[b]));
  }
  return Status::Ok();
}

}  // namespace ferry::cli
