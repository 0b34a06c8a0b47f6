// Tests of the NCCL transport that run without a GPU: loading libnccl (missing, not NCCL, too old),
// the nccl.* options, the (peer, tag) order of deferred groups, and host memory refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include "core/runtime/transport.h"
#include "transports/nccl/deferred_group.h"
#include "transports/nccl/nccl_library.h"
#include "transports/nccl/nccl_options.h"

namespace ferry {
namespace {

// The toolkit's NCCL, which CI machines have (the build compiles against its header).
constexpr char kToolkitNccl[] = "/usr/local/cuda/lib64/libnccl.so.2";

TEST(NcclLibraryTest, MissingLibraryNamesThePath) {
  auto loaded = NcclLibrary::Load("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loaded.status().message().find("nccl.library '/nonexistent/libnccl.so.2': cannot load"),
            std::string::npos)
      << loaded.status().ToString();
}

TEST(NcclLibraryTest, LibraryWithoutNcclSymbolsIsRefused) {
  auto loaded = NcclLibrary::Load("libm.so.6");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("'libm.so.6' has no ncclGetVersion"), std::string::npos)
      << loaded.status().ToString();
}

TEST(NcclLibraryTest, TooOldVersionIsRefusedWithBothVersions) {
  auto loaded = NcclLibrary::Load("tests/transports/nccl/libold_nccl_fixture.so");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(loaded.status().message().find("has NCCL 2.12.12; ferry needs 2.14.3 or newer"),
            std::string::npos)
      << loaded.status().ToString();
}

TEST(NcclLibraryTest, VersionNamesFollowNcclVersionMacro) {
  // nccl.h: NCCL_VERSION(2,28,9) = 22809; before 2.9 the code was X*1000+Y*100+Z (2.7.8 = 2708).
  EXPECT_EQ(NcclLibrary::VersionName(NCCL_VERSION(2, 28, 9)), "2.28.9");
  EXPECT_EQ(NcclLibrary::VersionName(2708), "2.7.8");
  EXPECT_EQ(NcclLibrary::VersionName(kMinNcclVersion), "2.14.3");
}

TEST(NcclLibraryTest, ToolkitLibraryLoadsWithoutAGpu) {
  if (access(kToolkitNccl, R_OK) != 0) GTEST_SKIP() << "SKIPPED: no " << kToolkitNccl;
  auto loaded = NcclLibrary::Load(kToolkitNccl);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_GE((*loaded)->version, kMinNcclVersion);
}

TEST(NcclOptionsTest, DefaultsAndRegistration) {
  ASSERT_TRUE(TransportRegistry::Default().Contains("nccl"));
  Config config = RuntimeConfig();
  TransportContext context;
  context.config = &config;
  auto options = NcclOptions::FromContext(context);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->library, "libnccl.so.2");
  EXPECT_EQ(options->device, -1);
  EXPECT_EQ(options->abort_seconds, 5);
}

TEST(NcclOptionsTest, BadDeviceIsRefusedNamingTheOption) {
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("nccl.device", "-2").ok());
  TransportContext context;
  context.config = &config;
  auto options = NcclOptions::FromContext(context);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("nccl.device is -2"), std::string::npos);
}

TEST(NcclOptionsTest, CreateReportsTheLibraryItCouldNotLoad) {
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("nccl.library", "/nonexistent/libnccl.so.2").ok());
  TransportContext context;
  context.config = &config;
  context.secret = "s";
  auto created = TransportRegistry::Default().Create("nccl", context);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().ToString().find("/nonexistent/libnccl.so.2"), std::string::npos);
}

// Worked by hand: rank 0 posts, in its scheduling order, recv(1, tag 9), send(1, tag 4),
// send(0, tag 7), recv(1, tag 4), send(1, tag 4) again. NCCL pairs by issue order per peer and
// direction, so the group must come out peer by peer, tags ascending, equal tags as posted:
// send(0,7); then peer 1: send(1,4) [request 2], recv(1,4), send(1,4) [request 5], recv(1,9).
TEST(DeferredGroupTest, OrdersByPeerThenTagKeepingPostingOrderOfEqualTags) {
  DeferredGroup group;
  group.Add({false, 1, 9, nullptr, 8, 1});
  group.Add({true, 1, 4, nullptr, 8, 2});
  group.Add({true, 0, 7, nullptr, 8, 3});
  group.Add({false, 1, 4, nullptr, 8, 4});
  group.Add({true, 1, 4, nullptr, 8, 5});
  std::vector<DeferredOp> ops = group.Take();
  std::vector<RequestId> order;
  for (const DeferredOp& op : ops) order.push_back(op.request);
  EXPECT_EQ(order, (std::vector<RequestId>{3, 2, 4, 5, 1}));
  EXPECT_TRUE(group.empty());
}

// Both ends of a link agree: rank 0's sends to 1 and rank 1's receives from 0, posted in opposite
// scheduling orders, come out with the same tag sequence.
TEST(DeferredGroupTest, BothEndsOfALinkIssueTheSameTagSequence) {
  DeferredGroup sender, receiver;
  for (uint64_t tag : {5, 1, 3}) sender.Add({true, 1, tag, nullptr, 4, tag});
  for (uint64_t tag : {3, 5, 1}) receiver.Add({false, 0, tag, nullptr, 4, tag});
  std::vector<uint64_t> sent, received;
  for (const DeferredOp& op : sender.Take()) sent.push_back(op.tag);
  for (const DeferredOp& op : receiver.Take()) received.push_back(op.tag);
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent, (std::vector<uint64_t>{1, 3, 5}));
}

TEST(NcclTransportTest, HostMemoryIsRefusedAsUnimplemented) {
  if (access(kToolkitNccl, R_OK) != 0) GTEST_SKIP() << "SKIPPED: no " << kToolkitNccl;
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("nccl.library", kToolkitNccl).ok());
  TransportContext context;
  context.config = &config;
  context.secret = "s";
  auto created = TransportRegistry::Default().Create("nccl", context);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::vector<uint8_t> host(64);
  auto registered = (*created)->RegisterMemory({host.data(), 64, MemoryKind::kHost, -1});
  ASSERT_FALSE(registered.ok());
  EXPECT_EQ(registered.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(registered.status().message().find("nccl moves CUDA memory only"), std::string::npos);
  EXPECT_FALSE((*created)->capabilities().host_memory);
  EXPECT_TRUE((*created)->capabilities().grouped);
}

}  // namespace
}  // namespace ferry
