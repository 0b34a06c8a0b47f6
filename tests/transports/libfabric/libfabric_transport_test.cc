// The libfabric transport under the multi-process scenarios with each provider this machine has
// (tcp, shm, sockets), plus checks of its registration and provider selection.
#include "transports/libfabric/libfabric_transport.h"

#include "gtest/gtest.h"
#include "tests/transports/ucx/process_suite_testutil.h"

namespace ferry::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Libfabric, TransportProcessTest,
    ::testing::Values(
        TransportUnderTest{"libfabric_tcp", "libfabric", {{"libfabric.provider", "tcp"}}},
        TransportUnderTest{
            "libfabric_shm", "libfabric", {{"libfabric.provider", "shm"}},
            {{"OversizedMessageFailsReceiveWithOutOfRange",
              "libfabric 1.17's shm provider never returns from fi_cq_read after truncating a "
              "1 MiB message into a 100-byte receive (both ranks spin inside the provider)"}}},
        TransportUnderTest{"libfabric_sockets", "libfabric", {{"libfabric.provider", "sockets"}}}),
    TransportLabel);

TEST(LibfabricTransportTest, RegisteredByName) {
  EXPECT_TRUE(TransportRegistry::Default().Contains("libfabric"));
  Config config = RuntimeConfig();
  EXPECT_EQ(*config.GetString("libfabric.provider"), "tcp");
}

TEST(LibfabricTransportTest, UnknownProviderIsAClearError) {
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("libfabric.provider", "no-such-provider").ok());
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &config;
  auto transport = TransportRegistry::Default().Create("libfabric", context);
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(transport.status().message().find("no-such-provider"), std::string::npos);
}

TEST(LibfabricTransportTest, TwoSidedOnlyAndShmStaysOnTheNode) {
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("libfabric.provider", "shm").ok());
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &config;
  auto transport = TransportRegistry::Default().Create("libfabric", context);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  const TransportCapabilities caps = (*transport)->capabilities();
  EXPECT_TRUE(caps.two_sided);
  EXPECT_FALSE(caps.one_sided);
  EXPECT_FALSE(caps.inter_node);
  EXPECT_EQ((*transport)->RemoteKey(MemoryHandle{1}).status().code(), StatusCode::kUnimplemented);
  int dummy = 0;
  EXPECT_EQ((*transport)->RegisterMemory(MemoryDesc{&dummy, 4, MemoryKind::kCuda, 0}).status().code(),
            StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ferry::testing
