// Reshard plans of the model presets' real framework layouts (Megatron -> vLLM and SGLang, scaled
// down so a test can execute them): every destination element arrives exactly once (executed
// element by element), the bytes crossing the network into each destination node are what that
// node's GPUs need counted once, and the MoE presets' experts are planned as stacks whether the
// layouts name them as tensor stacks or member by member, on either side or both.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/plan/stats.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/plan_sim_testutil.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry {
namespace {

struct PresetCase {
  std::string model;
  double scale;
  std::string source;
  std::string destination;
  int gpus_per_node;
  bool moe;
};

TEST(PresetPlans, NodesReceiveWhatTheyNeedOnceAndEveryElementArrives) {
  const std::vector<PresetCase> cases = {
      {"llama-3.1-8b", 1.0 / 64, "megatron:tp=2,pp=2", "vllm:tp=2,dp=4", 2, false},
      {"qwen3-30b-a3b", 1.0 / 64, "megatron:tp=2,pp=2,ep=4,etp=1,experts=single_grouped",
       "vllm:tp=2,dp=2,ep=4", 2, true},
      {"deepseek-v3", 1.0 / 256, "megatron:pp=2,first=31,ep=4,experts=single_grouped",
       "vllm:tp=4,dp=2,ep=8", 4, true},
      {"qwen3-30b-a3b", 1.0 / 64, "megatron:tp=2,pp=2,ep=4,etp=1,experts=single_grouped",
       "sglang:tp=4,attn_dp=2,ep=2", 2, true},
      // SGLang fuses DeepSeek-V3's shared expert into the routed experts' buffers
      {"deepseek-v3", 1.0 / 256, "megatron:pp=2,first=31,ep=4,experts=single_grouped",
       "sglang:tp=4,dp=2", 4, true},
  };
  // The MoE sources keep a rank's experts in one buffer (experts=single_grouped), so that member
  // by member they form constant-stride families the planner can fold.
  // How each side names the experts: as tensor stacks (the presets' default) on both, which
  // needs no folding; member by member on both, which the planner folds; and stacks on one side
  // with members on the other, where the planner rewrites the smaller layout: stacking its
  // members (nothing to fold then) or expanding its stacks (then folded).
  enum class Fold { kNo, kYes, kEither };
  struct Naming {
    const char* source;
    const char* destination;
    Fold folds;
  };
  const Naming namings[] = {{"", "", Fold::kNo},
                            {",expert_tensors=members", ",expert_tensors=members", Fold::kYes},
                            {"", ",expert_tensors=members", Fold::kEither},
                            {",expert_tensors=members", "", Fold::kEither}};
  for (const PresetCase& c : cases) {
    for (const Naming& naming : namings) {
      // Without experts every naming is the same layout.
      if (!c.moe && (*naming.source != '\0' || *naming.destination != '\0')) continue;
      SCOPED_TRACE(c.model + ": " + c.source + naming.source + " -> " + c.destination +
                   naming.destination);
      Result<models::ModelPreset> preset = models::MakePreset(c.model, c.scale);
      ASSERT_TRUE(preset.ok()) << preset.status().ToString();
      Result<models::FrameworkSpec> src = models::ParseFrameworkSpec(c.source + naming.source);
      Result<models::FrameworkSpec> dst =
          models::ParseFrameworkSpec(c.destination + naming.destination);
      ASSERT_TRUE(src.ok() && dst.ok());
      models::RefitOptions options;
      options.gpus_per_node = c.gpus_per_node;
      Result<models::RefitLayouts> refit = models::BuildRefitLayouts(*preset, *src, *dst, options);
      ASSERT_TRUE(refit.ok()) << refit.status().ToString();
      const Layout& source = refit->source;
      const Layout& destination = refit->destination;
      const Topology& topology = refit->topology;

      Result<PlanResult> r = PlanReshard(source, destination, topology);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (naming.folds != Fold::kEither) {
        EXPECT_EQ(r->stacks > 0, naming.folds == Fold::kYes) << r->stacks << " stacks";
      }
      Status valid = ValidatePlan(r->plan, source, destination);
      ASSERT_TRUE(valid.ok()) << valid.ToString();
      Status exec = testing::ExecuteAndCheck(r->plan, source, destination);
      ASSERT_TRUE(exec.ok()) << exec.ToString();

      const PlanStats stats = ComputePlanStats(r->plan, topology, &r->demand);
      std::vector<int> destination_nodes;
      for (int rank : destination.Ranks()) {
        const int node = topology.NodeOf(rank);
        if (destination_nodes.empty() || destination_nodes.back() != node) {
          destination_nodes.push_back(node);
        }
      }
      ASSERT_GE(destination_nodes.size(), 2u);
      for (int node : destination_nodes) {
        // The sources sit on other nodes: all a node needs crosses the network, and only once.
        Result<int64_t> need_or = testing::NodeNeedBytes(destination, topology, node);
        ASSERT_TRUE(need_or.ok()) << need_or.status().ToString();
        const int64_t need = *need_or;
        EXPECT_GT(need, 0);
        EXPECT_EQ(r->demand.destination_node_bytes[node], need) << "node " << node;
        EXPECT_EQ(stats.node_network_ingress[node], need) << "node " << node;
      }
    }
  }
}

}  // namespace
}  // namespace ferry
