// PlanStats: link-class bytes, per-node network traffic, lower bound and predicted time.
#include "core/plan/stats.h"

#include <gtest/gtest.h>

#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

TEST(PlanStats, CountsNetworkBytesAndPredictsTime) {
  TinyPlan t = MakeTinyPlan();
  Topology topo = Topology::Uniform(2, 1);  // two nodes
  NetworkDemand demand;
  demand.destination_node_bytes = {0, 16};
  demand.source_node_bytes = {16, 0};
  demand.must_leave_bytes = 16;
  demand.source_nodes = 1;
  PlanStats s = ComputePlanStats(t.plan, topo, &demand);
  EXPECT_EQ(s.messages, 1);
  EXPECT_EQ(s.network_messages, 1);
  EXPECT_EQ(s.bytes_by_link[static_cast<int>(LinkClass::kNetwork)], 16);
  EXPECT_EQ(s.node_network_ingress[1], 16);
  EXPECT_EQ(s.node_network_egress[0], 16);
  EXPECT_EQ(s.unpack_bytes, 16);
  EXPECT_DOUBLE_EQ(s.lower_bound.seconds, 16 / topo.NodeNetworkBandwidth());
  EXPECT_EQ(s.longest_message_chain, 1);
  EXPECT_GE(s.predicted_seconds, 16 / topo.nic_bandwidth + topo.network_latency);

  Topology same_node = Topology::Uniform(2, 2);
  PlanStats local = ComputePlanStats(t.plan, same_node, nullptr);
  EXPECT_EQ(local.bytes_by_link[static_cast<int>(LinkClass::kSameNode)], 16);
  EXPECT_EQ(local.network_messages, 0);
  EXPECT_EQ(local.lower_bound.seconds, 0);
}

}  // namespace
}  // namespace ferry
