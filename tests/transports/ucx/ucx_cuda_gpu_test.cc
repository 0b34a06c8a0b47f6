// The ucx transport on CUDA memory, as two processes on GPU 0: with a CUDA-enabled UCX loaded
// (for example the libucx-cu13 wheel's, tools/device/ucx_cuda.sh), ucx.cuda=on advertises CUDA
// memory and names the UCX transports carrying it; device-to-device messages from zero bytes to
// 64 MiB, host-to-device and device-to-host messages, and a device-to-device put arrive intact.
// Skips visibly without a GPU or without a UCX that supports CUDA memory, unless
// FERRY_REQUIRE_UCX_CUDA=1 (the device script sets it), which makes a missing UCX CUDA a failure.
//
// CUDA is touched only in forked children (the probe and the ranks): a process that initialised
// CUDA cannot hand it to children it forks afterwards.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/transports/ucx/process_ranks_testutil.h"
#include "transports/ucx/ucx_memory.h"

namespace ferry::testing {
namespace {

constexpr double kTimeoutSeconds = 60;

// What a forked child finds: bit 0 a CUDA device, bit 1 a UCX that supports CUDA memory.
int Probe() {
  const pid_t pid = fork();
  if (pid == 0) {
    int count = 0;
    const bool gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    bool ucx_cuda = false;
    ucp_config_t* config = nullptr;
    ucp_context_h context = nullptr;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    if (ucp_config_read(nullptr, nullptr, &config) == UCS_OK) {
      if (ucp_init(&params, config, &context) == UCS_OK) {
        ucx_cuda = (ucx::ContextMemoryTypes(context) & (uint64_t{1} << UCS_MEMORY_TYPE_CUDA)) != 0;
        ucp_cleanup(context);
      }
      ucp_config_release(config);
    }
    _exit((gpu ? 1 : 0) | (ucx_cuda ? 2 : 0));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(error));
}

// A registered device block of `bytes` (freed by the process's exit).
struct DeviceBlock {
  char* data = nullptr;
  MemoryHandle handle;
};
Result<DeviceBlock> MakeDeviceBlock(Transport& t, int64_t bytes) {
  DeviceBlock block;
  FERRY_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&block.data),
                                        static_cast<size_t>(bytes)), "cudaMalloc"));
  FERRY_RETURN_IF_ERROR(Cuda(cudaMemset(block.data, 0, static_cast<size_t>(bytes)), "cudaMemset"));
  FERRY_ASSIGN_OR_RETURN(block.handle, t.RegisterMemory({block.data, bytes, MemoryKind::kCuda, 0}));
  return block;
}

// Fills `bytes` of device memory at `at` with pattern `seed`, or checks it there.
Status FillDevice(char* at, int64_t bytes, uint64_t seed) {
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  FillPattern(host.data(), host.size(), seed);
  return Cuda(cudaMemcpy(at, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
Status CheckDevice(const char* at, int64_t bytes, uint64_t seed) {
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  FERRY_RETURN_IF_ERROR(
      Cuda(cudaMemcpy(host.data(), at, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H"));
  return CheckPattern(host.data(), host.size(), seed).WithContext("seed " + std::to_string(seed));
}

const std::vector<int64_t> kSizes = {0, 1, 4096, (1 << 20) + 3, 64 << 20};

class UcxCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int found = Probe();
    const bool required = std::getenv("FERRY_REQUIRE_UCX_CUDA") != nullptr &&
                          std::string(std::getenv("FERRY_REQUIRE_UCX_CUDA")) == "1";
    if ((found & 1) == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
    if ((found & 2) == 0) {
      ASSERT_FALSE(required) << "FERRY_REQUIRE_UCX_CUDA=1 but the loaded UCX ("
                             << ucp_get_version_string() << ") supports no CUDA memory";
      GTEST_SKIP() << "SKIPPED: the loaded UCX " << ucp_get_version_string()
                   << " supports no CUDA memory (load a CUDA-enabled one, see ucx_cuda.sh)";
    }
  }
  TransportUnderTest ucx_{"ucx_cuda", "ucx", {{"ucx.cuda", "on"}}};
};

// Rank 0 sends device-to-device messages of every size, one host-to-device and one device-to-host
// message; rank 1 receives them and checks the bytes. Both ranks lay out their device block alike:
// [0, 4096) the host-to-device message, [4096, 8192) the device-to-host one, then the sizes.
TEST_F(UcxCudaTest, MessagesBetweenDeviceAndHostMemory) {
  Status status = RunRanks(2, ucx_, [](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    FERRY_RETURN_IF_ERROR(Cuda(cudaSetDevice(0), "cudaSetDevice"));
    if (!t.capabilities().cuda_memory) return Internal("ucx.cuda=on but no cuda_memory capability");
    int64_t total = 8192;
    for (int64_t s : kSizes) total += s;
    FERRY_ASSIGN_OR_RETURN(DeviceBlock device, MakeDeviceBlock(t, total));
    std::vector<uint8_t> host(8192);
    FERRY_ASSIGN_OR_RETURN(MemoryHandle host_handle,
                           t.RegisterMemory({host.data(), 8192, MemoryKind::kHost, -1}));
    std::vector<RequestId> posted;
    int64_t offset = 8192;
    if (env.rank == 0) {
      const std::string links = t.DescribeLinks();
      std::printf("ucx links of rank 0: %s\n", links.c_str());
      if (links.find("CUDA memory through UCX") == std::string::npos ||
          links.find("cuda_") == std::string::npos) {
        return Internal("links do not name a UCX CUDA transport: " + links);
      }
      FillPattern(host.data(), 4096, 7);
      FERRY_RETURN_IF_ERROR(FillDevice(device.data + 4096, 4096, 8));
      for (size_t i = 0; i < kSizes.size(); ++i) {
        FERRY_RETURN_IF_ERROR(FillDevice(device.data + offset, kSizes[i], 100 + i));
        FERRY_ASSIGN_OR_RETURN(RequestId id,
                               t.PostSend(1, 100 + i, {device.handle, offset, kSizes[i]}));
        posted.push_back(id);
        offset += kSizes[i];
      }
      FERRY_ASSIGN_OR_RETURN(RequestId h2d, t.PostSend(1, 7, {host_handle, 0, 4096}));
      FERRY_ASSIGN_OR_RETURN(RequestId d2h, t.PostSend(1, 8, {device.handle, 4096, 4096}));
      posted.push_back(h2d);
      posted.push_back(d2h);
    } else {
      for (size_t i = 0; i < kSizes.size(); ++i) {
        FERRY_ASSIGN_OR_RETURN(RequestId id,
                               t.PostRecv(0, 100 + i, {device.handle, offset, kSizes[i]}));
        posted.push_back(id);
        offset += kSizes[i];
      }
      FERRY_ASSIGN_OR_RETURN(RequestId h2d, t.PostRecv(0, 7, {device.handle, 0, 4096}));
      FERRY_ASSIGN_OR_RETURN(RequestId d2h, t.PostRecv(0, 8, {host_handle, 4096, 4096}));
      posted.push_back(h2d);
      posted.push_back(d2h);
    }
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, posted, Deadline::AfterSeconds(45)));
    for (RequestId id : posted) FERRY_RETURN_IF_ERROR(done[id].status);
    if (env.rank == 0) return Status::Ok();
    offset = 8192;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      FERRY_RETURN_IF_ERROR(CheckDevice(device.data + offset, kSizes[i], 100 + i));
      offset += kSizes[i];
    }
    FERRY_RETURN_IF_ERROR(CheckDevice(device.data, 4096, 7));
    return CheckPattern(host.data() + 4096, 4096, 8).WithContext("device-to-host message");
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// Rank 0 puts 32 MiB of device memory into rank 1's registered device block, then notifies; the
// bytes are there when the notification completes.
TEST_F(UcxCudaTest, PutDeviceToDevice) {
  Status status = RunRanks(2, ucx_, [](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    FERRY_RETURN_IF_ERROR(Cuda(cudaSetDevice(0), "cudaSetDevice"));
    constexpr int64_t kBytes = 32 << 20;
    FERRY_ASSIGN_OR_RETURN(DeviceBlock device, MakeDeviceBlock(t, kBytes));
    if (env.rank == 1) {
      FERRY_ASSIGN_OR_RETURN(Bytes key, t.RemoteKey(device.handle));
      FERRY_RETURN_IF_ERROR(env.store->Set("t/key", key, Deadline::AfterSeconds(10)));
      FERRY_ASSIGN_OR_RETURN(RequestId notify, t.PostRecvNotify(0, 21));
      FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {notify}, Deadline::AfterSeconds(45)));
      FERRY_RETURN_IF_ERROR(done[notify].status);
      return CheckDevice(device.data + 4096, kBytes - 4096, 21);
    }
    FERRY_ASSIGN_OR_RETURN(Bytes key, env.store->Get("t/key", Deadline::AfterSeconds(10)));
    FERRY_RETURN_IF_ERROR(FillDevice(device.data, kBytes - 4096, 21));
    FERRY_ASSIGN_OR_RETURN(RequestId put, t.PostPut(1, 21, {device.handle, 0, kBytes - 4096},
                                                    RemoteBuffer{key, 4096}));
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {put}, Deadline::AfterSeconds(45)));
    return done[put].status;
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

}  // namespace
}  // namespace ferry::testing
