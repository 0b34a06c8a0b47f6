// vLLM's MoE parallel modes, hand-worked from the upstream code:
//  - vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make: with
//    enable_expert_parallel the EP size is tp*dp and EP rank = dp_rank * tp + tp_rank (its
//    docstring: "TP = 2, DP = 2 and EP = True ... device 2: TP = {1, 0} DP = {2, 1} EP = {4, 2}");
//    without it the MoE TP size is tp*dp, each rank a shard of every expert;
//  - vllm/model_executor/layers/fused_moe/expert_map_manager.py determine_expert_map ("linear"):
//    base = E // ep, remainder = E % ep, rank r holds base + (r < remainder) experts from
//    r * base + min(r, remainder);
//  - EPLB's redundant experts: the layer's experts are the E + R physical ones
//    (vllm/model_executor/layers/fused_moe/layer.py), placed as above, physical p loading logical
//    expert p below E and (p - E) mod E after (vllm/distributed/eplb/eplb_state.py
//    build_initial_global_physical_to_logical_map, read by FusedMoE.make_expert_params_mapping);
//    vllm/config/parallel.py refuses EPLB without expert parallelism or with one rank,
//    vllm/model_executor/layers/fused_moe/eplb_manager.py when the physical experts do not
//    divide over the EP ranks;
//  - after EPLB rearranged the experts, physical expert p (numbered EP rank after EP rank as
//    above) holds logical expert physical_to_logical_map[moe_layer][p]
//    (vllm/distributed/eplb/eplb_state.py EplbState, rebalance_execute.py
//    rearrange_expert_weights_inplace), read from the engine's map ("eplb_map=FILE").
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

// One MoE layer of `experts` experts (FFN 16, hidden 32, bf16) routed in `groups` groups.
ModelPreset SmallMoe(int64_t experts, int64_t groups = 0) {
  ModelConfig c = OneLayerConfig("small-moe-" + std::to_string(experts), ModelFamily::kQwen3Moe,
                                 32, 4, 4, 8, 64);
  c.expert_groups = groups;
  c.num_experts = experts;
  c.moe_intermediate = 16;
  return PresetOf(c);
}

const char* kW13 = "model.layers.0.mlp.experts.routed_experts.w13_weight";
const char* kGateStack = "model.layers.0.mlp.experts.[0:10].gate_proj.weight";

TEST(VllmExpertParallelTest, UnevenExpertsLinearPlacement) {
  ModelPreset p = SmallMoe(10);
  // tp 2, dp 2, EP on: ep 4; 10 experts -> 3, 3, 2, 2 from 0, 3, 6, 8.
  Layout l = BuildAsSpecified(p, "vllm:tp=2,dp=2,ep=4");
  const int64_t counts[4] = {3, 3, 2, 2}, firsts[4] = {0, 3, 6, 8};
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto gate = FragmentsIn(l, rank, kW13, kGateStack);
    ASSERT_EQ(gate.size(), 1u);
    EXPECT_EQ(gate[0].box.lo[0], firsts[rank]);
    EXPECT_EQ(gate[0].box.hi[0], firsts[rank] + counts[rank]);
    EXPECT_EQ(gate[0].box.lo[1], 0);  // whole experts: rows 0..15
    EXPECT_EQ(gate[0].box.hi[1], 16);
    EXPECT_EQ(l.buffers[l.FindBuffer(rank, kW13)].bytes, counts[rank] * 2 * 16 * 32 * 2);
  }
}

TEST(VllmExpertParallelTest, WithoutExpertParallelEveryRankHoldsAShard) {
  ModelPreset p = SmallMoe(10);
  // ep 1: the MoE TP size is tp*dp = 4; rank 3 (dp 1, tp 1) holds FFN rows 12..15 of all 10.
  Layout l = BuildAsSpecified(p, "vllm:tp=2,dp=2");
  auto gate = FragmentsIn(l, 3, kW13, kGateStack);
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 0);
  EXPECT_EQ(gate[0].box.hi[0], 10);
  EXPECT_EQ(gate[0].box.lo[1], 12);
  EXPECT_EQ(gate[0].box.hi[1], 16);
  EXPECT_EQ(l.buffers[l.FindBuffer(3, kW13)].bytes, 10 * 2 * 4 * 32 * 2);
}

TEST(VllmExpertParallelTest, FewerExpertsThanRanks) {
  ModelPreset p = SmallMoe(3);
  Layout l = BuildAsSpecified(p, "vllm:tp=4,ep=4");
  EXPECT_GE(l.FindBuffer(2, kW13), 0);
  EXPECT_EQ(l.FindBuffer(3, kW13), -1);  // EP rank 3 owns no expert
}

// "round_robin" (determine_expert_map): EP rank r holds torch.arange(r, E, ep); for 10 experts
// over ep 4, rank 1 holds 1, 5, 9 as local experts 0, 1, 2. vLLM keeps it only for models with
// several expert groups, and with dp > 1 only under the DeepEP low-latency or NIXL EP all-to-all
// backends (expert_map_manager.py determine_expert_placement_strategy).
TEST(VllmExpertParallelTest, RoundRobinPlacement) {
  ModelPreset p = SmallMoe(10, /*groups=*/2);
  for (const char* naming : {"", ",expert_tensors=members"}) {
    SCOPED_TRACE(naming);
    Layout l = Build(p, std::string("vllm:tp=4,ep=4,placement=round_robin") + naming);
    const int64_t expert = 2 * 16 * 32 * 2;  // bytes of one expert's w13
    const int64_t experts[3] = {1, 5, 9};
    for (int le = 0; le < 3; ++le) {
      auto gate = FragmentsIn(l, 1, kW13, "model.layers.0.mlp.experts." +
                                              std::to_string(experts[le]) + ".gate_proj.weight");
      ASSERT_EQ(gate.size(), 1u) << le;
      EXPECT_EQ(gate[0].loc.byte_offset, le * expert);
    }
    EXPECT_EQ(l.buffers[l.FindBuffer(3, kW13)].bytes, 2 * expert);  // experts 3 and 7
  }
  EXPECT_EQ(Spec("vllm:tp=4,ep=4,placement=round_robin").ToString(),
            "vllm:tp=4,dp=1,ep=4,placement=round_robin");
  Result<Layout> ungrouped =
      BuildFrameworkLayout(SmallMoe(10), Spec("vllm:tp=4,ep=4,placement=round_robin"));
  ASSERT_FALSE(ungrouped.ok());
  EXPECT_NE(ungrouped.status().message().find("multiple expert groups"), std::string::npos);
  EXPECT_FALSE(BuildFrameworkLayout(p, Spec("vllm:tp=2,dp=2,placement=round_robin")).ok());
  Result<Layout> data_parallel =
      BuildFrameworkLayout(p, Spec("vllm:tp=2,dp=2,ep=4,placement=round_robin"));
  ASSERT_FALSE(data_parallel.ok());
  EXPECT_NE(data_parallel.status().message().find("falls back to linear placement"),
            std::string::npos);
}

TEST(VllmExpertParallelTest, RedundantExpertsReplicateTheFirstLogicalExperts) {
  ModelPreset p = SmallMoe(10);
  const int64_t expert = 2 * 16 * 32 * 2;  // bytes of one expert's w13
  // 10 + 2 physical over ep 4: 3 a rank; rank 3 holds physical 9, 10, 11 = logical 9, 0, 1.
  Layout stacks = BuildAsSpecified(p, "vllm:tp=2,dp=2,ep=4,redundant=2");
  auto gate = FragmentsIn(stacks, 3, kW13, kGateStack);
  ASSERT_EQ(gate.size(), 2u);
  EXPECT_EQ(gate[0].box.lo[0], 9);
  EXPECT_EQ(gate[0].loc.byte_offset, 0);
  EXPECT_EQ(gate[1].box.lo[0], 0);
  EXPECT_EQ(gate[1].box.hi[0], 2);
  EXPECT_EQ(gate[1].loc.byte_offset, expert);
  EXPECT_EQ(stacks.buffers[stacks.FindBuffer(3, kW13)].bytes, 3 * expert);
  Layout members = Build(p, "vllm:tp=2,dp=2,ep=4,redundant=2");
  auto expert0 = FragmentsIn(members, 3, kW13, "model.layers.0.mlp.experts.0.gate_proj.weight");
  ASSERT_EQ(expert0.size(), 1u);
  EXPECT_EQ(expert0[0].loc.byte_offset, expert);
  EXPECT_EQ(FragmentsIn(members, 0, kW13, "model.layers.0.mlp.experts.0.gate_proj.weight").size(),
            1u);
  ExpectCoverage(members, p, [](const std::string& n) {
    if (!IsExpert(n)) return Copies(2, 2, 1)(n);
    const bool replicated = n.find(".experts.0.") != std::string::npos ||
                            n.find(".experts.1.") != std::string::npos;
    return replicated ? 2 : 1;
  });
}

TEST(VllmExpertParallelTest, RedundantExpertsRefusedAsVllmRefusesThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"vllm:tp=2,dp=2,redundant=2", "enable_expert_parallel must be True to use EPLB"},
      {"vllm:redundant=2", "EPLB requires tensor, prefill-context, or data parallelism"},
      {"vllm:tp=4,ep=4,placement=round_robin,redundant=2", "no redundant experts"},
      {"vllm:tp=2,ep=2,redundant=30", "hold one logical expert twice"},
      // vllm/model_executor/layers/fused_moe/eplb_manager.py validate_configuration: 10 + 3
      // physical experts do not divide over 4 EP ranks
      {"vllm:tp=2,dp=2,ep=4,redundant=3", "EPLB currently only supports even distribution of "
                                          "experts across ranks. Got 13 experts and 4 EP ranks"},
      {"vllm:tp=2,dp=2,ep=4,eplb_map=/unread.json", "Got 10 experts and 4 EP ranks"},
  };
  for (const auto& [spec, reason] : cases) {
    Result<Layout> l = BuildFrameworkLayout(SmallMoe(10, /*groups=*/2), Spec(spec));
    ASSERT_FALSE(l.ok()) << spec;
    EXPECT_NE(l.status().message().find(reason), std::string::npos) << l.status().message();
  }
}

TEST(VllmExpertParallelTest, RearrangedExpertsFollowTheEnginesMap) {
  ModelPreset p = SmallMoe(10);
  const int64_t expert = 2 * 16 * 32 * 2;  // bytes of one expert's w13
  // 10 + 2 physical over ep 4, 3 a rank; the map after a rearrangement: rank 0 holds logical
  // 5, 6, 7; rank 1 0, 1, 2; rank 2 3, 4, 8; rank 3 9, 5, 0 (5 and 0 replicated).
  const std::string map = WriteTemp(
      "eplb.json", R"({"physical_to_logical_map": [[5, 6, 7, 0, 1, 2, 3, 4, 8, 9, 5, 0]]})");
  const std::string spec = "vllm:tp=2,dp=2,ep=4,redundant=2,eplb_map=" + map;
  Layout stacks = BuildAsSpecified(p, spec);
  auto first = FragmentsIn(stacks, 0, kW13, kGateStack);
  ASSERT_EQ(first.size(), 1u);  // logical 5..7 consecutive: one fragment
  EXPECT_EQ(first[0].box.lo[0], 5);
  EXPECT_EQ(first[0].box.hi[0], 8);
  auto last = FragmentsIn(stacks, 3, kW13, kGateStack);
  ASSERT_EQ(last.size(), 3u);
  const int64_t logical[3] = {9, 5, 0};
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(last[slot].box.lo[0], logical[slot]);
    EXPECT_EQ(last[slot].box.hi[0], logical[slot] + 1);
    EXPECT_EQ(last[slot].loc.byte_offset, slot * expert);
  }
  Layout members = Build(p, spec);
  ExpectCoverage(members, p, [](const std::string& n) {
    if (!IsExpert(n)) return Copies(2, 2, 1)(n);
    const bool replicated = n.find(".experts.0.") != std::string::npos ||
                            n.find(".experts.5.") != std::string::npos;
    return replicated ? 2 : 1;
  });
  EXPECT_EQ(Spec(spec).ToString(), spec);
}

TEST(VllmExpertParallelTest, EplbMapsThatDoNotFitAreRefusedByName) {
  ModelPreset p = SmallMoe(10);
  const std::pair<std::string, const char*> files[] = {
      {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]]",
       "has 2 rows; the model has 1 MoE layers"},
      {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0]]", "expected a list of 12 logical expert ids"},
      {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 0, 1]]", "physical expert 9: not a logical expert id"},
      {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 0, 1]]", "logical expert 9 has no physical replica"},
      {"{\"physical_to_logical_map\": 7}", "expected physical_to_logical_map, a list of rows"},
  };
  int n = 0;
  for (const auto& [text, reason] : files) {
    const std::string path = WriteTemp("bad" + std::to_string(n++) + ".json", text);
    Result<Layout> l =
        BuildFrameworkLayout(p, Spec("vllm:tp=2,dp=2,ep=4,redundant=2,eplb_map=" + path));
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_NE(l.status().message().find(reason), std::string::npos) << l.status().message();
  }
  const std::string good = WriteTemp("good.json", "[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]]");
  const std::pair<std::string, const char*> specs[] = {
      {"vllm:tp=2,dp=2,redundant=2,eplb_map=" + good, "enable_expert_parallel must be True"},
      {"vllm:tp=4,ep=4,placement=round_robin,eplb_map=" + good,
       "numbers physical experts linearly"},
      {"vllm:tp=2,dp=2,ep=4,redundant=2,eplb_map=/no/such/map.json", "cannot open EPLB map"},
  };
  for (const auto& [spec, reason] : specs) {
    Result<Layout> l = BuildFrameworkLayout(SmallMoe(10, /*groups=*/2), Spec(spec));
    ASSERT_FALSE(l.ok()) << spec;
    EXPECT_NE(l.status().message().find(reason), std::string::npos) << l.status().message();
  }
}

TEST(VllmExpertParallelTest, OnlyOneAndTpTimesDpExist) {
  ModelPreset p = SmallMoe(10);
  for (const char* bad : {"vllm:tp=2,dp=2,ep=2", "vllm:tp=4,ep=2", "vllm:tp=2,dp=4,ep=4"}) {
    Result<Layout> l = BuildFrameworkLayout(p, Spec(bad));
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_NE(l.status().message().find("vLLM has no ep="), std::string::npos) << bad;
    EXPECT_NE(l.status().message().find("--enable-expert-parallel"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace ferry::models
