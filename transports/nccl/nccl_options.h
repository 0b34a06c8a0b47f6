// NcclOptions: the nccl.* options of the NCCL transport (its OptionSpec table and their parsing
// from a TransportContext), kept apart from the transport so that they are tested without a GPU.
#pragma once

#include <string>
#include <vector>

#include "core/base/config.h"
#include "core/base/status.h"
#include "core/runtime/transport.h"

namespace ferry {

struct NcclOptions {
  std::string library = "libnccl.so.2";  // nccl.library: what dlopen loads
  int device = -1;            // nccl.device: CUDA device of the communicator; -1: the current one
  double abort_seconds = 5;   // deadline.abort: how long teardown waits for ncclCommAbort

  // The nccl.* rows for TransportRegistration::options.
  static std::vector<OptionSpec> Table();
  // Reads the options from `context.config` (defaults without a config). Errors name the option.
  static Result<NcclOptions> FromContext(const TransportContext& context);
};

}  // namespace ferry
