// The ucx transport under the multi-process scenarios, over UCX's tcp transport (the one UCX 1.13
// can detect peer failure on; shared memory is tried too where UCX may pair it with tcp), plus
// checks of its registration and option handling.
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

}  // namespace
}  // namespace ferry::testing
