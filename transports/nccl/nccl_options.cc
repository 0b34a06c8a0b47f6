// NcclOptions: see nccl_options.h.
#include "transports/nccl/nccl_options.h"

namespace ferry {

std::vector<OptionSpec> NcclOptions::Table() {
  return {
      {"nccl.library", "libnccl.so.2",
       "the NCCL library to dlopen: a file name searched like LD_LIBRARY_PATH, or a path (a "
       "cluster's own build, the nvidia-nccl-cu13 wheel's nvidia/nccl/lib/libnccl.so.2)"},
      {"nccl.device", "-1",
       "CUDA device of the NCCL communicator; -1: the calling thread's current device"},
  };
}

Result<NcclOptions> NcclOptions::FromContext(const TransportContext& context) {
  NcclOptions options;
  if (context.config == nullptr) return options;
  const Config& config = *context.config;
  FERRY_ASSIGN_OR_RETURN(options.library, config.GetString("nccl.library"));
  FERRY_ASSIGN_OR_RETURN(int64_t device, config.GetInt("nccl.device"));
  if (device < -1 || device > 1023) {
    return InvalidArgument("nccl.device is " + std::to_string(device) +
                           ": a CUDA device ordinal, or -1 for the current device");
  }
  options.device = static_cast<int>(device);
  auto abort_seconds = config.GetSeconds("deadline.abort");
  if (abort_seconds.ok()) options.abort_seconds = *abort_seconds;
  return options;
}

}  // namespace ferry
