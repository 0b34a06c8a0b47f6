// Helpers of the NCCL transport's GPU tests; see nccl_gpu_testutil.h.
#include "tests/transports/nccl/nccl_gpu_testutil.h"

#include <cuda_runtime_api.h>

#include "transports/nccl/nccl_library.h"

namespace ferry::testing {

std::string FindNcclLibrary() {
  for (const char* path : {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                           "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}) {
    if (NcclLibrary::Load(path).ok()) return path;
  }
  return "";
}

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Result<NcclRank> CreateNcclRank(int rank, int size, Store* store, const std::string& library,
                                const std::vector<std::string>& settings) {
  NcclRank r;
  r.config = std::make_unique<Config>(RuntimeConfig());
  FERRY_RETURN_IF_ERROR(r.config->Set("nccl.library", library));
  for (const std::string& s : settings) {
    const size_t eq = s.find('=');
    FERRY_RETURN_IF_ERROR(r.config->Set(s.substr(0, eq), s.substr(eq + 1)));
  }
  TransportContext context;
  context.rank = rank;
  context.size = size;
  context.config = r.config.get();
  context.store = store;
  context.group_key = "nccl-test";
  context.secret = "nccl-test-secret";
  FERRY_ASSIGN_OR_RETURN(r.transport, TransportRegistry::Default().Create("nccl", context));
  return r;
}

}  // namespace ferry::testing
