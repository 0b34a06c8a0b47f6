// DeviceBuffers: one rank's buffers of one side of a refit in CUDA memory, 256-byte aligned and
// carved out of one cudaMalloc allocation (as a trainer's weights sit in a few allocator
// segments) or out of one range of 20 MiB cuMem* (VMM) mappings (as PyTorch's expandable
// segments hold them; buffers then span mappings), mirrored by the HostBuffers that hold the pattern: Upload copies the mirror up (the
// sources' fill), Download copies the device bytes down (to name the element a failed check found). Used by
// `ferry run --memory cuda`; blocking calls; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/vmm.h"
#include "core/layout/buffer_list.h"
#include "core/runtime/transport.h"
#include "tools/cli/buffer_carving.h"
#include "tools/cli/host_buffers.h"

namespace ferry::cli {

class DeviceBuffers {
 public:
  // Allocates every buffer of `specs` that belongs to `rank` on CUDA device `device`, in VMM
  // mappings when `vmm`.
  static Result<std::unique_ptr<DeviceBuffers>> Allocate(const BufferList& specs, int rank,
                                                         int device, bool vmm = false);
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  // Buffer `buffer` of `specs` on this rank: {base, bytes, kCuda, device}.
  MemoryDesc Desc(size_t buffer) const;
  // Device pointers, one per buffer of `specs`: null for buffers of other ranks.
  std::vector<char*> pointers() const;
  Status Zero();
  Status Upload(const HostBuffers& mirror);
  Status Download(HostBuffers& mirror) const;
  int64_t total() const { return carving_.total; }

 private:
  DeviceBuffers() = default;
  BufferCarving carving_;
  char* block_ = nullptr;
  int device_ = 0;
  cuda::VmmAllocation vmm_;  // when the block is VMM memory
};

}  // namespace ferry::cli
