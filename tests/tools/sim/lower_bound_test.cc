// Tests for union volumes and the refit lower bound.
#include "tools/sim/lower_bound.h"

#include <gtest/gtest.h>

namespace ferry::sim {
namespace {

Box B(std::vector<int64_t> lo, std::vector<int64_t> hi) { return *Box::Make(lo, hi); }

TEST(LowerBoundTest, UnionVolumeHandlesDuplicatesAndOverlaps) {
  EXPECT_EQ(UnionVolume({}), 0);
  EXPECT_EQ(UnionVolume({B({0, 0}, {4, 4}), B({0, 0}, {4, 4})}), 16);
  EXPECT_EQ(UnionVolume({B({0, 0}, {4, 4}), B({4, 0}, {8, 4})}), 32);
  EXPECT_EQ(UnionVolume({B({0, 0}, {4, 4}), B({2, 2}, {6, 6})}), 28);
  EXPECT_EQ(UnionVolume({B({0}, {10}), B({5}, {15}), B({20}, {25})}), 20);
}

TEST(LowerBoundTest, NodeIngressBoundsTheRefit) {
  // Tensor w [16, 1024] bf16 (32 KiB) on ranks 0 (node 0). Destination: ranks 2 and 3 (node 1)
  // each hold the whole tensor: node 1 needs 32 KiB once over the network.
  Layout src, dst;
  TensorSpec w{"w", {16, 1024}, DType::kBF16};
  int ts = *src.AddTensor(w);
  src.AppendFragment(ts, Box::FromShape(w.shape), 0, "w");
  int td = *dst.AddTensor(w);
  dst.AppendFragment(td, Box::FromShape(w.shape), 2, "w");
  dst.AppendFragment(td, Box::FromShape(w.shape), 3, "w");
  ClusterSpec c;
  c.gpus_per_node = 2;
  c.nics_per_node = 2;
  c.num_nodes = 2;
  c.nic_bandwidth = 1e6;
  c.network_efficiency = 1;
  c.nvlink_bandwidth = 1e9;
  c.nvlink_efficiency = 1;
  c.nic_latency = 0;
  c.nic_message_overhead = 0;
  Result<LowerBound> lb = ComputeLowerBound(src, dst, c, RankMapping::Identity(4));
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_DOUBLE_EQ(lb->max_node_ingress_bytes, 32768);
  EXPECT_DOUBLE_EQ(lb->total_network_bytes, 32768);
  EXPECT_NEAR(lb->seconds, 32768 / 2e6, 1e-12);  // two NICs on node 1
  EXPECT_NE(lb->limit.find("node 1"), std::string::npos);

  // Bytes already on the destination node do not cross the network.
  src.AppendFragment(ts, Box::FromShape(w.shape), 3, "w");
  lb = ComputeLowerBound(src, dst, c, RankMapping::Identity(4));
  ASSERT_TRUE(lb.ok());
  EXPECT_DOUBLE_EQ(lb->total_network_bytes, 0);
  EXPECT_NEAR(lb->seconds, 32768 / (1e9 + 1e6), 1e-12);  // rank 2 still needs it over NVLink
}

TEST(LowerBoundTest, MissingSourceTensorIsAnError) {
  Layout src, dst;
  int t = *dst.AddTensor({"x", {4}, DType::kFP32});
  dst.AppendFragment(t, Box::FromShape({4}), 0, "x");
  ClusterSpec c;
  c.num_nodes = 1;
  EXPECT_FALSE(ComputeLowerBound(src, dst, c, RankMapping::Identity(1)).ok());
}

}  // namespace
}  // namespace ferry::sim
