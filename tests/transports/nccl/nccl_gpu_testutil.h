// Helpers of the NCCL transport's GPU tests: the machine's libnccl, whether a GPU is there, and a
// transport of one rank of a communicator created through the registry. Test-only.
#pragma once

#include <memory>
#include <string>

#include "core/base/config.h"
#include "core/runtime/store.h"
#include "core/runtime/transport.h"

namespace ferry::testing {

// The first libnccl.so.2 that loads and is new enough: the dynamic linker's, the CUDA toolkit's,
// the distribution's; empty when none does.
std::string FindNcclLibrary();

// True when a CUDA device is present (tests skip visibly otherwise).
bool HaveGpu();

struct NcclRank {
  std::unique_ptr<Config> config;
  std::unique_ptr<Transport> transport;
};

// Creates rank `rank` of `size` of the "nccl" transport at epoch 0 over `store`, with the options
// `settings` ("name=value") on top of nccl.library = `library`.
Result<NcclRank> CreateNcclRank(int rank, int size, Store* store, const std::string& library,
                                const std::vector<std::string>& settings = {});

}  // namespace ferry::testing
