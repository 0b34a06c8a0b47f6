// Which memory a rank's staging arena is: pinned host memory or device memory, from what the
// transports of its staged messages accept (TransportCapabilities host_memory / cuda_memory).
//
// A rank whose buffers are all host memory stages in host memory. A rank with CUDA buffers stages
// on the device when its staged messages go through transports that all move CUDA memory: those
// that move only CUDA memory (NCCL) need it, and those that move both (UCX with CUDA support) are
// handed the device staging directly, with no pinned host copy in the path. One transport that
// moves host memory only (tcp, a UCX without CUDA) makes it pinned host memory, which the copy
// kernel packs into and unpacks from. A rank with CUDA buffers and no staged message (every
// message of it a direct read) stages on the device: its slots are the bf16 twins its direct
// reads fill and its Quantize kernels read. One arena cannot serve a CUDA-only and a host-only
// transport at once: that mix is refused.
//
// Pure function; thread-compatible.
#pragma once

#include <span>
#include <string>

#include "core/base/status.h"

namespace ferry {

// What one transport of a rank's staged messages accepts.
struct StagingTransport {
  std::string name;
  bool host_memory = true;
  bool cuda_memory = false;
};

// True: device staging; false: host (pinned when `on_gpu`). `transports` are those carrying the
// rank's staged messages (repeats allowed). kUnimplemented, naming both transports and `rank`, for
// a CUDA-only transport next to a host-only one.
Result<bool> StageOnDevice(int rank, bool on_gpu, std::span<const StagingTransport> transports);

}  // namespace ferry
