// vLLM's EPLB redundant experts planned end to end: a Megatron -> vLLM refit of one MoE layer of
// 8 experts into vllm:tp=2,dp=2,ep=4,redundant=4 on nodes of 2 GPUs executes element by element,
// and each destination node's network ingress is what its GPUs hold, once. By hand (vLLM's linear
// placement of 12 physical experts, physical p >= 8 holding logical p - 8): destination node 0
// holds logical experts 0-5 and node 1 holds 6, 7, 0, 1, 2, 3, two experts more each than the
// 4 apiece without redundancy, so each node's ingress grows by exactly two experts' bytes.
#include <gtest/gtest.h>

#include <string>

#include "core/plan/stats.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/plan_sim_testutil.h"
#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry {
namespace {

using models::ModelFamily;

// Appends the network ingress of each destination node of the refit into `destination` to
// `ingress`, after checking the plan moves every element and each node receives what it needs
// once.
void DestinationNodeIngress(const std::string& destination, std::vector<int64_t>& ingress) {
  models::ModelConfig c =
      models::OneLayerConfig("eight-experts", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 64);
  c.num_experts = 8;
  c.moe_intermediate = 16;
  models::RefitOptions options;
  options.gpus_per_node = 2;
  Result<models::RefitLayouts> refit = models::BuildRefitLayouts(
      models::PresetOf(c), models::Spec("megatron:tp=2,ep=4,etp=1,experts=single_grouped"),
      models::Spec(destination), options);
  ASSERT_TRUE(refit.ok()) << refit.status().ToString();
  Result<PlanResult> r = PlanReshard(refit->source, refit->destination, refit->topology);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status valid = ValidatePlan(r->plan, refit->source, refit->destination);
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  Status exec = testing::ExecuteAndCheck(r->plan, refit->source, refit->destination);
  EXPECT_TRUE(exec.ok()) << exec.ToString();
  const PlanStats stats = ComputePlanStats(r->plan, refit->topology, &r->demand);
  for (int node : {2, 3}) {  // the 4 source ranks fill nodes 0 and 1
    Result<int64_t> need = testing::NodeNeedBytes(refit->destination, refit->topology, node);
    ASSERT_TRUE(need.ok()) << need.status().ToString();
    EXPECT_EQ(stats.node_network_ingress[node], *need) << "node " << node;
    ingress.push_back(stats.node_network_ingress[node]);
  }
}

TEST(RedundantExpertsPlan, ReplicasCostOnlyTheBytesTheirNodeNeeds) {
  const int64_t expert = 3 * 16 * 32 * 2;  // gate, up and down of one expert, bf16
  std::vector<int64_t> plain, eplb;
  DestinationNodeIngress("vllm:tp=2,dp=2,ep=4", plain);
  DestinationNodeIngress("vllm:tp=2,dp=2,ep=4,redundant=4", eplb);
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(eplb.size(), 2u);
  EXPECT_EQ(eplb[0] - plain[0], 2 * expert);
  EXPECT_EQ(eplb[1] - plain[1], 2 * expert);
}

}  // namespace
}  // namespace ferry
