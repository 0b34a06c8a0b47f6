// The lanes UCX selected, as ferry reads and checks them: parsing ucp_ep_print_info's lane lines
// (a sample written by hand in the format of ucp_ep_config_lane_info_str, openucx/ucx
// src/ucp/core/ucp_ep.c v1.13.1), and on real endpoints between two ranks of this process:
// "sm,tcp" in error mode peer runs over tcp/lo and says so (refused under ucx.strict_tls), while
// error mode none keeps shared memory.
#include "transports/ucx/ucx_lanes.h"

#include <gtest/gtest.h>

#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);

namespace {

// "%2d:" pads one-digit resource indices; the device field is padded to 20 characters.
constexpr const char* kPrintInfo =
    "#\n"
    "# UCP endpoint \n"
    "#\n"
    "#               peer: ferry-r1\n"
    "#                 lane[0]:  2:posix/memory.0 md[0]      -> md[0]/posix/sysdev[255] am am_bw#0\n"
    "#                 lane[1]: 11:cma/memory.0 md[4]        -> md[4]/cma/sysdev[255] rma_bw#0\n"
    "#                 lane[2]:  3:tcp/lo.0 md[1]            -> md[1]/tcp/sysdev[255] keepalive wireup\n"
    "#\n"
    "#                tag_send: 0..<egr/short>..8185..<egr/bcopy>..8192..<rndv>..(inf)\n";

TEST(UcxLanesTest, ParsesTheLaneLinesOfPrintInfo) {
  EXPECT_EQ(ucx::ParseLanes(kPrintInfo), (std::vector<std::string>{"posix/memory", "cma/memory", "tcp/lo"}));
  EXPECT_TRUE(ucx::ParseLanes("# lane[0]: cm tcp\n# nothing here\n").empty());
}

TEST(UcxLanesTest, ClassifiesLanesAndWhatTlsAsksFor) {
  EXPECT_TRUE(ucx::AsksForSharedMemory("sm,tcp"));
  EXPECT_TRUE(ucx::AsksForSharedMemory("tcp,posix"));
  EXPECT_FALSE(ucx::AsksForSharedMemory("tcp"));
  EXPECT_FALSE(ucx::AsksForSharedMemory("^sm"));
  EXPECT_TRUE(ucx::UsesSharedMemory({"tcp/lo", "sysv/memory"}));
  EXPECT_FALSE(ucx::UsesSharedMemory({"self/memory", "tcp/lo"}));
  EXPECT_TRUE(ucx::ThroughLoopback({"tcp/lo"}));
  EXPECT_FALSE(ucx::ThroughLoopback({"tcp/eth0"}));
  EXPECT_EQ(ucx::SummarizeLanes({{1, {"tcp/lo"}}, {2, {"tcp/lo", "tcp/lo"}}, {3, {"posix/memory"}}}),
            "posix/memory to peer 3; tcp/lo to peers 1,2");
}

Result<TransportWorld> TwoRanks(std::map<std::string, std::string> options) {
  return CreateTransportWorld(ConformanceParams::For("ucx", std::move(options)), 2, Deadline::AfterSeconds(20));
}

TEST(UcxLanesTest, ErrorModePeerRunsSmTcpOverLoopbackAndSaysSo) {
  auto world = TwoRanks({{"ucx.tls", "sm,tcp"}, {"ucx.error_mode", "peer"}});
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  const std::string links = world->ranks[0]->DescribeLinks();
  EXPECT_NE(links.find("tcp/lo"), std::string::npos) << links;
  EXPECT_EQ(links.find("/memory to peer 1"), std::string::npos) << links;
}

TEST(UcxLanesTest, StrictTlsRefusesWhatWasNotAskedFor) {
  auto world = TwoRanks({{"ucx.tls", "sm,tcp"}, {"ucx.error_mode", "peer"}, {"ucx.strict_tls", "true"}});
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kFailedPrecondition) << world.status().ToString();
  EXPECT_NE(world.status().message().find("ucx.tls=sm,tcp asks for shared memory"), std::string::npos)
      << world.status().ToString();
}

TEST(UcxLanesTest, ErrorModeNoneKeepsSharedMemory) {
  auto world = TwoRanks({{"ucx.tls", "sm,tcp"}, {"ucx.error_mode", "none"}, {"ucx.strict_tls", "true"}});
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  const std::string links = world->ranks[0]->DescribeLinks();
  EXPECT_NE(links.find("/memory"), std::string::npos) << links;
}

}  // namespace
}  // namespace ferry::testing
