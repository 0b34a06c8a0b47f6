// The ucx transport under the multi-process scenarios, over UCX's tcp transport (the one UCX 1.13
// can detect peer failure on; shared memory is tried too where UCX may pair it with tcp), plus
// checks of its registration and option handling, ucx.cuda among them.
#include "transports/ucx/ucx_transport.h"

#include "gtest/gtest.h"
#include "tests/transports/ucx/process_suite_testutil.h"

namespace ferry::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Ucx, TransportProcessTest,
    ::testing::Values(TransportUnderTest{"ucx_tcp", "ucx", {{"ucx.tls", "tcp"}}},
                      TransportUnderTest{"ucx_sm_tcp", "ucx", {{"ucx.tls", "sm,tcp"}}}),
    TransportLabel);

TEST(UcxTransportTest, RegisteredByName) {
  EXPECT_TRUE(TransportRegistry::Default().Contains("ucx"));
  Config config = RuntimeConfig();
  EXPECT_EQ(*config.GetString("ucx.error_mode"), "peer");
}

TEST(UcxTransportTest, RejectsUnknownErrorMode) {
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("ucx.error_mode", "sometimes").ok());
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &config;
  auto transport = TransportRegistry::Default().Create("ucx", context);
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(transport.status().message().find("ucx.error_mode"), std::string::npos);
}

TEST(UcxTransportTest, RejectsCudaMemoryAndForeignHandles) {
  Config config = RuntimeConfig();
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &config;
  auto transport = TransportRegistry::Default().Create("ucx", context);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  int dummy = 0;
  auto cuda = (*transport)->RegisterMemory(MemoryDesc{&dummy, 4, MemoryKind::kCuda, 0});
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE((*transport)->DeregisterMemory(MemoryHandle{42}).ok());
}

Result<std::unique_ptr<Transport>> CreateWithCuda(const std::string& mode) {
  Config config = RuntimeConfig();
  FERRY_RETURN_IF_ERROR(config.Set("ucx.cuda", mode));
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &config;
  return TransportRegistry::Default().Create("ucx", context);
}

// Whether the UCX this test loaded supports CUDA memory (Debian's 1.13 does not).
bool LoadedUcxHasCuda() {
  auto transport = CreateWithCuda("auto");
  return transport.ok() && (*transport)->capabilities().cuda_memory;
}

TEST(UcxTransportTest, CudaOnIsRefusedByAUcxWithoutCuda) {
  if (LoadedUcxHasCuda()) GTEST_SKIP() << "SKIPPED: the loaded UCX supports CUDA memory";
  auto transport = CreateWithCuda("on");
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(transport.status().message().find("ucx.cuda=on, but the loaded UCX"), std::string::npos)
      << transport.status().ToString();
  EXPECT_NE(transport.status().message().find("does not support CUDA memory"), std::string::npos)
      << transport.status().ToString();
}

// auto without CUDA in UCX, and off anywhere: host memory only, so the executor stages CUDA data
// through pinned host memory (staging_memory.h) and the transport refuses CUDA blocks.
TEST(UcxTransportTest, CudaAutoWithoutCudaAndOffMoveHostMemoryOnly) {
  std::vector<std::string> modes = {"off"};
  if (!LoadedUcxHasCuda()) modes.push_back("auto");
  for (const std::string& mode : modes) {
    auto transport = CreateWithCuda(mode);
    ASSERT_TRUE(transport.ok()) << mode << ": " << transport.status().ToString();
    const TransportCapabilities caps = (*transport)->capabilities();
    EXPECT_TRUE(caps.host_memory) << mode;
    EXPECT_FALSE(caps.cuda_memory) << mode;
    int dummy = 0;
    auto cuda = (*transport)->RegisterMemory(MemoryDesc{&dummy, 4, MemoryKind::kCuda, 0});
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnimplemented) << mode;
    EXPECT_EQ((*transport)->DescribeLinks().find("CUDA"), std::string::npos) << mode;
  }
}

TEST(UcxTransportTest, RejectsUnknownCudaMode) {
  auto transport = CreateWithCuda("maybe");
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(transport.status().message().find("ucx.cuda must be"), std::string::npos);
}

}  // namespace
}  // namespace ferry::testing
