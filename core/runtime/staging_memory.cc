// The staging arena's memory kind from the transports' capabilities (see staging_memory.h).
#include "core/runtime/staging_memory.h"

namespace ferry {

Result<bool> StageOnDevice(int rank, bool on_gpu, std::span<const StagingTransport> transports) {
  if (!on_gpu) return false;
  if (transports.empty()) return true;
  std::string device_only, host_only;
  for (const StagingTransport& t : transports) {
    if (!t.host_memory) device_only = t.name;
    if (!t.cuda_memory) host_only = t.name;
  }
  if (!device_only.empty() && !host_only.empty()) {
    return Unimplemented("rank " + std::to_string(rank) + " stages messages for " + device_only +
                         " (CUDA memory only) and for " + host_only + " (host memory only) in one "
                         "run; use one kind of transport for the links of a CUDA refit");
  }
  return host_only.empty();
}

}  // namespace ferry
