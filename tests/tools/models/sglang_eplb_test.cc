// Tests for the SGLang layout's EPLB maps ("sglang:...,eplb_map=FILE", tools/models/eplb_map.h
// ReadSglangEplbMaps): worked by hand from SGLang 0.5.23's python/sglang/srt. FusedMoE loads
// logical expert e of layer l into every physical expert that row l of the server's
// ExpertLocationMetadata.physical_to_logical_map assigns it (layers/moe/fused_moe_triton/layer.py
// weight_loader -> eplb/expert_location.py logical_to_all_physical), EP rank r holding physical
// experts [r * P/ep, (r + 1) * P/ep) (_map_global_expert_id_to_local_expert_id); the map has a row
// per decoder layer (models/*.py get_model_config_for_expert_location: num_hidden_layers), each
// server its own (its EPLB all-reduces expert counts over the server's ranks only), and the
// NextN draft's decoder is built as layer 0 (models/deepseek_nextn.py), reading row 0.
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

// One MoE layer of 10 experts (FFN 16, hidden 32, bf16), Qwen3-MoE's classes.
ModelPreset SmallMoe() {
  ModelConfig c = OneLayerConfig("small-moe", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 64);
  c.num_experts = 10;
  c.moe_intermediate = 16;
  return PresetOf(c);
}

const char* kW13 = "model.layers.0.mlp.experts.w13_weight";
const char* kGateStack = "model.layers.0.mlp.experts.[0:10].gate_proj.weight";
constexpr int64_t kExpert13 = 2 * 16 * 32 * 2;  // bytes of one expert's w13 (tp = ep)

// Two servers of tp=4, ep=4 with 2 redundant experts (12 physical, 3 a rank), each rearranged by
// its own EPLB: server 0 (ranks 0-3) holds 5 6 7 | 0 1 2 | 3 4 8 | 9 5 0, server 1 (ranks 4-7)
// 1 0 2 | 3 4 5 | 6 7 8 | 9 0 1.
TEST(SglangEplbTest, EachServerFollowsItsOwnMap) {
  ModelPreset p = SmallMoe();
  const std::string map = WriteTemp(
      "servers.json",
      R"({"engines": [{"physical_to_logical_map": [[5, 6, 7, 0, 1, 2, 3, 4, 8, 9, 5, 0]]},
                      [[1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]]]})");
  const std::string spec = "sglang:tp=4,dp=1,ep=4,redundant=2,eplb_map=" + map + ",engines=2";
  Layout l = BuildAsSpecified(p, spec);
  const std::vector<std::vector<int64_t>> held = {{5, 6, 7}, {0, 1, 2}, {3, 4, 8}, {9, 5, 0},
                                                  {1, 0, 2}, {3, 4, 5}, {6, 7, 8}, {9, 0, 1}};
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(SlotsOf(l, rank, kW13, kGateStack, kExpert13), held[static_cast<size_t>(rank)])
        << "rank " << rank;
    EXPECT_EQ(BytesOf(l, rank, kW13), 3 * kExpert13);
  }
  ExpectCoverage(Build(p, spec), p, [](const std::string& n) {
    if (!IsExpert(n)) return TpReplicated(n) ? 8 : 2;
    if (n.find(".experts.0.") != std::string::npos) return 4;
    if (n.find(".experts.1.") != std::string::npos) return 3;
    return n.find(".experts.5.") != std::string::npos ? 3 : 2;
  });
  EXPECT_EQ(Spec(spec).ToString(), spec);
}

// A tiny DeepSeek-V3 (a dense layer 0, then layer 1 of 4 routed experts) with its NextN draft,
// tp=2, ep=2: row 1 of the map places layer 1's experts (2 3 | 0 1), row 0, the dense layer's,
// the draft's (1 0 | 3 2), which the checkpoint holds as model.layers.2.
TEST(SglangEplbTest, TheNextnDraftReadsRowZero) {
  ModelPreset p = PresetOf(TinyDeepseek(/*moe=*/true));
  const std::string map = WriteTemp("draft.json", "[[1, 0, 3, 2], [2, 3, 0, 1]]");
  Layout l = BuildAsSpecified(p, "sglang:tp=2,ep=2,mtp=1,eplb_map=" + map);
  const std::string target = "model.layers.1.mlp.experts.";
  const std::string draft_gate = "model.layers.2.mlp.experts.[0:4].gate_proj.weight";
  const auto first = [&](int rank, const std::string& buffer, const std::string& gate) {
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (const Fragment& f : FragmentsIn(l, rank, buffer, gate)) {
      runs.emplace_back(f.box.lo[0], f.box.hi[0]);
    }
    return runs;
  };
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(first(0, target + "w13_weight", target + "[0:4].gate_proj.weight"), (Runs{{2, 4}}));
  EXPECT_EQ(first(1, target + "w13_weight", target + "[0:4].gate_proj.weight"), (Runs{{0, 2}}));
  EXPECT_EQ(first(0, "model.decoder.mlp.experts.w13_weight", draft_gate),
            (Runs{{1, 2}, {0, 1}}));
  EXPECT_EQ(first(1, "model.decoder.mlp.experts.w13_weight", draft_gate),
            (Runs{{3, 4}, {2, 3}}));
  const FrameworkSpec r =
      ResolveFrameworkSpec(Spec("sglang:tp=2,ep=2,mtp=1,eplb_map=" + map), p.config()).value();
  bool cited = false;
  for (const LayoutRule& rule :
       RulesForTensor(p.config(), r, "model.layers.1.mlp.experts.0.gate_proj.weight")) {
    cited |= rule.upstream.find("logical_to_all_physical") != std::string::npos;
  }
  EXPECT_TRUE(cited);
}

// The map in YAML, as a person writes one, is the same map as in JSON, as the engines dump it.
TEST(SglangEplbTest, YamlAndJsonMapsAgree) {
  ModelPreset p = SmallMoe();
  const std::string json = WriteTemp(
      "map.json", R"({"physical_to_logical_map": [[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8]]})");
  const std::string yaml =
      WriteTemp("map.yaml", "physical_to_logical_map:\n  - [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8]\n");
  const Layout from_json = BuildAsSpecified(p, "sglang:tp=4,ep=4,redundant=2,eplb_map=" + json);
  const Layout from_yaml = BuildAsSpecified(p, "sglang:tp=4,ep=4,redundant=2,eplb_map=" + yaml);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(SlotsOf(from_yaml, rank, kW13, kGateStack, kExpert13),
              SlotsOf(from_json, rank, kW13, kGateStack, kExpert13));
  }
  EXPECT_EQ(SlotsOf(from_yaml, 3, kW13, kGateStack, kExpert13),
            (std::vector<int64_t>{0, 9, 8}));
}

// FP8 block-quantized experts under two servers' maps: each server's expert stacks, FP8 with a
// float32 scale a 128x128 block, sit in the slots its own map gives (BlockAlignedDeepseek: 8
// routed experts of FFN 256 over ep=2, a rank's FFN shard 256 rows, hidden 256).
TEST(SglangEplbTest, Fp8ExpertsFollowEachServersMap) {
  ModelPreset p = PresetOf(BlockAlignedDeepseek(8));
  const std::string map = WriteTemp(
      "fp8.json", R"({"engines": [[[0, 1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0]],
                                  [[0, 1, 2, 3, 4, 5, 6, 7], [4, 5, 6, 7, 0, 1, 2, 3]]]})");
  const Layout l =
      BuildAsSpecified(p, "sglang:tp=2,ep=2,quant=fp8_block,engines=2,eplb_map=" + map);
  const std::string experts = "model.layers.1.mlp.experts.";
  const std::string gate = "model.layers.1.mlp.experts.[0:8].gate_proj.weight";
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  const auto runs = [&](int rank) {
    Runs out;
    for (const Fragment& f : FragmentsIn(l, rank, experts + "w13_weight", gate)) {
      out.emplace_back(f.box.lo[0], f.box.hi[0]);
    }
    return out;
  };
  EXPECT_EQ(runs(0), (Runs{{7, 8}, {6, 7}, {5, 6}, {4, 5}}));
  EXPECT_EQ(runs(2), (Runs{{4, 8}}));
  EXPECT_EQ(runs(3), (Runs{{0, 4}}));
  EXPECT_EQ(DTypeOf(l, gate), DType::kFP8E4M3);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(BytesOf(l, rank, experts + "w13_weight"), 4 * 2 * 256 * 256);
    EXPECT_EQ(BytesOf(l, rank, experts + "w13_weight_scale_inv"), 4 * (4 * 2) * 4);
    EXPECT_EQ(BytesOf(l, rank, experts + "w2_weight_scale_inv"), 4 * (2 * 2) * 4);
  }
}

TEST(SglangEplbTest, MapsThatDoNotFitAreRefusedByName) {
  ModelPreset p = SmallMoe();
  const std::string row = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]";
  const std::string one = "[" + row + "]";
  const auto servers = [&](const std::string& first) {
    return "{\"engines\": [" + first + ", " + one + "]}";
  };
  const std::pair<std::string, const char*> files[] = {
      {servers("[" + row + ", " + row + "]"),
       "server 0 has 2 rows; the model has 1 decoder layers"},
      {servers("[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0]]"), "expected a list of 12 logical expert ids"},
      {servers("[[0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 0, 1]]"),
       "physical expert 9: not a logical expert id"},
      {servers("[[0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 0, 1]]"),
       "logical expert 9 has no physical replica"},
      {"{\"engines\": [" + one + "]}", "engines must list 2 maps, one per server"},
      {"{\"engines\": [" + one + ", [[0]]]}", "server 1, row 0: expected a list of 12"},
      {one, "it holds one map per server"},
  };
  int n = 0;
  for (const auto& [text, reason] : files) {
    const std::string path = WriteTemp("bad" + std::to_string(n++) + ".json", text);
    Result<Layout> l = BuildFrameworkLayout(
        p, Spec("sglang:tp=4,ep=4,redundant=2,engines=2,eplb_map=" + path));
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_TRUE(Says(l.status(), reason)) << l.status().message();
  }
  for (const auto& [text, reason] :
       {std::pair<std::string, const char*>{"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9.0, 0, 1]]",
                                            "physical expert 9: not a logical expert id"},
        {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, \"9\", 0, 1]]", "physical expert 9: not a logical"},
        {"[[0, 1, 2, 3, 4, 5, 6, 7, 8, 18446744073709551615, 0, 1]]", "physical expert 9"},
        {"[[0, 1, 2", "parse error"},
        {"- - - - - - - - 0", "nested deeper than an EPLB map"}}) {
    const std::string path = WriteTemp("bad" + std::to_string(n++) + ".json", text);
    Result<Layout> l =
        BuildFrameworkLayout(p, Spec("sglang:tp=4,ep=4,redundant=2,eplb_map=" + path));
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_TRUE(Says(l.status(), reason)) << l.status().message();
  }
  const std::string good = WriteTemp("good.json", "[" + row + "]");
  const std::pair<std::string, const char*> specs[] = {
      {"sglang:tp=4,dp=2,ep=4,redundant=2,eplb_map=" + good, "run each replica as a server"},
      {"sglang:tp=4,ep=4,redundant=2,eplb_map=/no/such/map.json", "cannot open EPLB map"},
  };
  for (const auto& [spec, reason] : specs) {
    Result<Layout> l = BuildFrameworkLayout(p, Spec(spec));
    ASSERT_FALSE(l.ok()) << spec;
    EXPECT_TRUE(Says(l.status(), reason)) << l.status().message();
  }
  Result<Layout> dense = BuildFrameworkLayout(Preset("llama-3.1-8b", 1.0 / 64),
                                              Spec("sglang:tp=2,eplb_map=" + good));
  ASSERT_FALSE(dense.ok());
  EXPECT_TRUE(Says(dense.status(), "the model has no experts")) << dense.status().message();
}

}  // namespace
}  // namespace ferry::models
