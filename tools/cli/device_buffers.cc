// DeviceBuffers: a rank's buffers of one side in one CUDA allocation or one range of VMM mappings.
#include "tools/cli/device_buffers.h"

#include <algorithm>

#include "core/cuda/batched_copy.h"
#include "core/cuda/copy_stream.h"

namespace ferry::cli {

// PyTorch's expandable segments map the large pool in 20 MiB pieces
// (c10/cuda/CUDACachingAllocator.cpp, kLargeBuffer).
constexpr int64_t kVmmChunkBytes = int64_t{20} << 20;

Result<std::unique_ptr<DeviceBuffers>> DeviceBuffers::Allocate(const BufferList& specs, int rank,
                                                               int device, bool vmm) {
  std::unique_ptr<DeviceBuffers> buffers(new DeviceBuffers);
  buffers->device_ = device;
  buffers->carving_ = BufferCarving::Of(specs, rank);
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(device));
  if (vmm) {
    FERRY_ASSIGN_OR_RETURN(buffers->vmm_, cuda::AllocateVmm(std::max<int64_t>(buffers->carving_.block_bytes, 1),
                                                            kVmmChunkBytes, device));
    buffers->block_ = static_cast<char*>(buffers->vmm_.base);
    return buffers;
  }
  FERRY_ASSIGN_OR_RETURN(void* block, cuda::DeviceAlloc(buffers->carving_.block_bytes));
  buffers->block_ = static_cast<char*>(block);
  return buffers;
}

DeviceBuffers::~DeviceBuffers() {
  if (vmm_.base != nullptr) {
    (void)cuda::FreeVmm(vmm_);
  } else if (block_ != nullptr) {
    (void)cuda::DeviceFree(block_);
  }
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
