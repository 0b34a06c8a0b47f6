// Destination ranks of one node that need boxes of a tensor which overlap without being equal (two
// vLLM engines of different TP on one node): each distinct byte crosses the network into the node
// once, the lower bound's demand counts distinct bytes, and the plan still delivers every element
// exactly once (executed against the oracle).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/plan/stats.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/plan_sim_testutil.h"

namespace ferry {
namespace {

constexpr int kGpusPerNode = 8;

// `shape` split into `parts` equal boxes along `dim`.
std::vector<Box> Split(const std::vector<int64_t>& shape, int dim, int parts) {
  std::vector<Box> boxes;
  const int64_t step = shape[dim] / parts;
  for (int i = 0; i < parts; ++i) {
    Box b = Box::FromShape(shape);
    b.lo[dim] = i * step;
    b.hi[dim] = (i + 1) * step;
    boxes.push_back(b);
  }
  return boxes;
}

struct TwoEngines {
  Layout source, destination;
  int64_t node_bytes = 0;  // distinct bytes the destination node needs: every tensor whole
};

// Tensors "w" (both engines split dim 0) and "v" (engine A splits dim 0, engine B dim 1), held by
// a trainer of TP2 on node 0 (ranks 0-1, split along dim 1); on node 1, engine A of TP `tp_a`
// (ranks 8..) and engine B of TP `tp_b` (the ranks after A's).
TwoEngines MakeTwoEngines(int tp_a, int tp_b) {
  TwoEngines out;
  const std::vector<int64_t> shape = {16, 24};
  for (const char* name : {"w", "v"}) {
    const TensorSpec spec{name, shape, DType::kBF16};
    const int ts = out.source.AddTensor(spec).value();
    const int td = out.destination.AddTensor(spec).value();
    const std::vector<Box> src = Split(shape, 1, 2);
    for (int r = 0; r < 2; ++r) out.source.AppendFragment(ts, src[r], r, std::string(name));
    const std::vector<Box> a = Split(shape, 0, tp_a);
    for (int r = 0; r < tp_a; ++r) {
      out.destination.AppendFragment(td, a[r], kGpusPerNode + r, std::string(name));
    }
    const std::vector<Box> b = Split(shape, std::string(name) == "w" ? 0 : 1, tp_b);
    for (int r = 0; r < tp_b; ++r) {
      out.destination.AppendFragment(td, b[r], kGpusPerNode + tp_a + r, std::string(name));
    }
    out.node_bytes += spec.NumBytes();
  }
  return out;
}

TEST(DistinctBytes, EachDistinctByteEntersTheNodeOnce) {
  const Topology topology = Topology::Uniform(2 * kGpusPerNode, kGpusPerNode);
  for (const auto& [tp_a, tp_b] : std::vector<std::pair<int, int>>{{2, 4}, {4, 2}, {1, 4},
                                                                    {4, 4}, {1, 2}}) {
    SCOPED_TRACE("TP" + std::to_string(tp_a) + " + TP" + std::to_string(tp_b));
    const TwoEngines c = MakeTwoEngines(tp_a, tp_b);
    Result<PlanResult> r = PlanReshard(c.source, c.destination, topology);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, c.source, c.destination).ok());
    const Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
    ASSERT_TRUE(exec.ok()) << exec.ToString();
    const PlanStats stats = ComputePlanStats(r->plan, topology, &r->demand);
    EXPECT_EQ(stats.node_network_ingress[1], c.node_bytes);
    EXPECT_EQ(r->demand.destination_node_bytes[1], c.node_bytes);
    EXPECT_EQ(r->demand.must_leave_bytes, c.node_bytes);
    // The baseline's demand is the same physical limit.
    Result<PlanResult> g = PlanGatherBroadcast(c.source, c.destination, topology);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->demand.destination_node_bytes[1], c.node_bytes);
    ASSERT_TRUE(testing::ExecuteAndCheck(g->plan, c.source, c.destination).ok());
  }
}

// The same with the engines' ranks spread over two destination nodes: each node receives what
// its ranks need, each distinct byte once.
TEST(DistinctBytes, EveryNodeCountsItsOwnDistinctBytes) {
  const Topology topology = Topology::Uniform(3 * kGpusPerNode, kGpusPerNode);
  TwoEngines c = MakeTwoEngines(2, 4);
  // A third engine of TP8 on node 2 needs everything again, once.
  for (int t = 0; t < 2; ++t) {
    const std::vector<Box> boxes = Split(c.destination.tensors[t].shape, 1, 8);
    for (int r = 0; r < 8; ++r) {
      c.destination.AppendFragment(t, boxes[r], 2 * kGpusPerNode + r,
                                   c.destination.tensors[t].name);
    }
  }
  Result<PlanResult> r = PlanReshard(c.source, c.destination, topology);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
  ASSERT_TRUE(exec.ok()) << exec.ToString();
  const PlanStats stats = ComputePlanStats(r->plan, topology, &r->demand);
  for (int node : {1, 2}) {
    EXPECT_EQ(stats.node_network_ingress[node], c.node_bytes) << "node " << node;
    EXPECT_EQ(r->demand.destination_node_bytes[node], c.node_bytes) << "node " << node;
  }
}

}  // namespace
}  // namespace ferry
