// Tests for tools/models/vllm_pipeline and the vLLM layouts with pp > 1: layers per PP rank by
// get_pp_indices' rule and an explicit partition, vLLM's rejections, which PP ranks hold the
// embedding, final norm and lm_head per model family, and the DP x PP x TP rank order, each
// worked by hand from the upstream file named beside it.
#include "tools/models/vllm_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

// `layers` Llama decoder layers: hidden 8, 2 heads and 2 KV heads of 4, FFN 16, vocabulary 64
// (vLLM pads it to 64, 32 rows a TP rank of 2).
ModelPreset TinyLlama(int64_t layers, bool tied) {
  ModelConfig c = OneLayerConfig("tiny-llama", ModelFamily::kLlama, 8, 2, 2, 4, 64);
  c.num_layers = layers;
  c.intermediate = 16;
  c.tie_embeddings = tied;
  return PresetOf(c);
}

std::vector<int64_t> Split(int64_t layers, int pp, const std::vector<int>& partition = {}) {
  Result<std::vector<int64_t>> r = VllmPipelineLayers(layers, pp, partition);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<int64_t>{};
}

TEST(VllmPipelineTest, LayersPerRankFollowGetPpIndices) {
  // vllm/distributed/utils.py get_pp_indices: layers // pp each, remainder to partitions[-2], ...
  EXPECT_EQ(Split(5, 2), (std::vector<int64_t>{3, 2}));        // 2,2 + 1 on [-2]
  EXPECT_EQ(Split(5, 3), (std::vector<int64_t>{2, 2, 1}));     // 1,1,1 + 1 on [-2], [-3]
  EXPECT_EQ(Split(6, 4), (std::vector<int64_t>{1, 2, 2, 1}));  // remainder 2: the middle ranks
  EXPECT_EQ(Split(7, 4), (std::vector<int64_t>{2, 2, 2, 1}));  // remainder 3: all but the last
  EXPECT_EQ(Split(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(Split(61, 1), (std::vector<int64_t>{61}));
  // VLLM_PP_LAYER_PARTITION="1,4" taken as given
  EXPECT_EQ(Split(5, 2, {1, 4}), (std::vector<int64_t>{1, 4}));
}

TEST(VllmPipelineTest, PartitionRejectedWithVllmsReason) {
  // vllm/distributed/utils.py get_pp_indices: its two ValueErrors, word for word
  Status sum = VllmPipelineLayers(5, 2, {3, 3}).status();
  EXPECT_TRUE(Says(sum, "sum(partitions)=6 does not match num_hidden_layers=5.")) << sum.ToString();
  Status len = VllmPipelineLayers(5, 2, {1, 2, 2}).status();
  EXPECT_TRUE(Says(len, "len(partitions)=3 does not match pp_size=2.")) << len.ToString();
  EXPECT_FALSE(ParsePipelinePartition("3.x", "VLLM_PP_LAYER_PARTITION").ok());
  EXPECT_FALSE(ParsePipelinePartition("-1.6", "VLLM_PP_LAYER_PARTITION").ok());
  EXPECT_FALSE(ParsePipelinePartition("", "VLLM_PP_LAYER_PARTITION").ok());
  // The spec separates keys by commas, so the partition's counts are separated by '.'.
  EXPECT_FALSE(ParseFrameworkSpec("vllm:tp=2,pp=2,partition=3,2").ok());
  const FrameworkSpec spec = Spec("vllm:tp=2,pp=2,partition=3.2");
  EXPECT_EQ(spec.ToString(), "vllm:tp=2,pp=2,partition=3.2,dp=1,ep=1");
  EXPECT_EQ(NumRanks(Spec("vllm:tp=2,pp=3,dp=2,engines=2")), 24);
  Status resolved =
      ResolveFrameworkSpec(Spec("vllm:tp=2,pp=2,partition=4.2"), TinyLlama(5, false).config())
          .status();
  EXPECT_TRUE(Says(resolved, "sum(partitions)=6 does not match num_hidden_layers=5."))
      << resolved.ToString();
}

TEST(VllmPipelineLayoutTest, FiveLlamaLayersOverTwoRanks) {
  ModelPreset p = TinyLlama(5, false);
  Layout l = Build(p, "vllm:tp=2,pp=2");
  EXPECT_EQ(l.Ranks(), (std::vector<int>{0, 1, 2, 3}));
  ExpectCoverage(l, p, Copies(1, 2, 0));
  // vllm/model_executor/models/utils.py make_layers: PP rank 0 (ranks 0, 1) layers 0..2, PP rank 1
  // (ranks 2, 3) layers 3, 4
  for (int layer = 0; layer < 5; ++layer) {
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(Holds(l, rank, Qkv(layer)), (layer < 3) == (rank < 2)) << layer << " " << rank;
    }
  }
  // vllm/model_executor/models/llama.py: embed_tokens first, norm and lm_head last
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(Holds(l, rank, "model.embed_tokens.weight"), rank < 2);
    EXPECT_EQ(Holds(l, rank, "model.norm.weight"), rank >= 2);
    EXPECT_EQ(Holds(l, rank, "lm_head.weight"), rank >= 2);
  }
  auto head = FragmentsIn(l, 3, "lm_head.weight", "lm_head.weight");
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].box.lo[0], 32);  // TP rank 1: rows 32..63
  EXPECT_EQ(head[0].box.hi[0], 64);
  // --explain names the PP ranks and the upstream files.
  const FrameworkSpec resolved = ResolveFrameworkSpec(Spec("vllm:tp=2,pp=2"), p.config()).value();
  auto rules = [&](const std::string& tensor) {
    std::string text;
    for (const LayoutRule& r : RulesForTensor(p.config(), resolved, tensor)) {
      text += r.rule + " | " + r.upstream + "\n";
    }
    return text;
  };
  EXPECT_NE(rules("lm_head.weight").find("on PP rank(s) 1 "), std::string::npos);
  EXPECT_NE(rules("model.layers.3.self_attn.q_proj.weight").find("vllm/distributed/utils.py"),
            std::string::npos);
  // The explicit partition moves layers 1..4 to PP rank 1.
  Layout split = Build(p, "vllm:tp=2,pp=2,partition=1.4");
  EXPECT_TRUE(Holds(split, 1, Qkv(0)));
  EXPECT_FALSE(Holds(split, 1, Qkv(1)));
  EXPECT_TRUE(Holds(split, 2, Qkv(1)));
}

TEST(VllmPipelineLayoutTest, MiddleRankHoldsOnlyItsLayers) {
  ModelPreset p = TinyLlama(5, false);
  Layout l = Build(p, "vllm:pp=3");  // vllm/distributed/utils.py get_pp_indices: 2, 2, 1
  ExpectCoverage(l, p, Copies(1, 1, 0));
  const std::vector<int> stage_of_layer = {0, 0, 1, 1, 2};
  for (int layer = 0; layer < 5; ++layer) {
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(Holds(l, rank, Qkv(layer)), stage_of_layer[layer] == rank) << layer << " " << rank;
    }
  }
  // vllm/model_executor/models/llama.py: the middle rank builds none of them
  for (const char* b : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_FALSE(Holds(l, 1, b)) << b;
  }
}

TEST(VllmPipelineLayoutTest, TiedEmbeddingsOnTheFirstAndLastRank) {
  ModelPreset p = TinyLlama(5, true);
  Layout l = Build(p, "vllm:tp=2,pp=2");
  // vllm/model_executor/models/llama.py: tied, the last rank builds embed_tokens too, and
  // lm_head.tie_weights(embed_tokens) is that parameter: two copies, no lm_head buffer
  ExpectCoverage(l, p, [](const std::string& n) {
    if (n == "model.embed_tokens.weight") return 2;
    return TpReplicated(n) ? 2 : 1;
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(Holds(l, rank, "model.embed_tokens.weight"));
    EXPECT_FALSE(Holds(l, rank, "lm_head.weight"));
  }
  auto last = FragmentsIn(l, 2, "model.embed_tokens.weight", "model.embed_tokens.weight");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].box.lo[0], 0);  // TP rank 0 of the last PP rank: rows 0..31
  EXPECT_EQ(last[0].box.hi[0], 32);
}

TEST(VllmPipelineLayoutTest, RanksOrderedDpThenPpThenTp) {
  ModelPreset p = TinyLlama(5, false);
  Layout l = Build(p, "vllm:tp=2,pp=2,dp=2,engines=2");
  EXPECT_EQ(l.Ranks().size(), 16u);
  ExpectCoverage(l, p, [](const std::string& n) { return 2 * 2 * (TpReplicated(n) ? 2 : 1); });
  // vllm/distributed/parallel_state.py initialize_model_parallel: ranks reshaped
  // (-1, dp, pp, pcp, tp): rank = ((engine*dp + dp_rank)*pp + pp_rank)*tp + tp_rank
  for (int rank = 0; rank < 16; ++rank) {
    const int pp_rank = rank / 2 % 2;
    EXPECT_EQ(Holds(l, rank, "model.embed_tokens.weight"), pp_rank == 0) << rank;
    EXPECT_EQ(Holds(l, rank, Qkv(3)), pp_rank == 1) << rank;
  }
  // rank 5: engine 0, dp 1, pp 0, tp 1: embedding rows 32..63
  auto embed = FragmentsIn(l, 5, "model.embed_tokens.weight", "model.embed_tokens.weight");
  ASSERT_EQ(embed.size(), 1u);
  EXPECT_EQ(embed[0].box.lo[0], 32);
  // rank 14: engine 1, dp 1, pp 1, tp 0: lm_head rows 0..31
  auto head = FragmentsIn(l, 14, "lm_head.weight", "lm_head.weight");
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].box.lo[0], 0);
}

TEST(VllmPipelineLayoutTest, MoeExpertsOverEachStagesDpTimesTp) {
  // Two MoE layers of 4 experts (FFN 16), hidden 32, vocabulary 64.
  ModelConfig c = OneLayerConfig("two-moe", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 64);
  c.num_layers = 2;
  c.num_experts = 4;
  c.moe_intermediate = 16;
  ModelPreset p = PresetOf(c);
  Layout l = BuildAsSpecified(p, "vllm:pp=2,dp=2,ep=2");
  // ranks: 0 = dp 0 pp 0, 1 = dp 0 pp 1, 2 = dp 1 pp 0, 3 = dp 1 pp 1
  // vllm/model_executor/models/qwen3_moe.py: embed_tokens, norm, lm_head on every PP rank
  for (int rank = 0; rank < 4; ++rank) {
    for (const char* b : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
      EXPECT_TRUE(Holds(l, rank, b)) << b << " on " << rank;
    }
  }
  // vllm/distributed/parallel_state.py: PP rank 1's EP group is ranks 1 (ep rank 0) and 3 (ep 1);
  // vllm/model_executor/layers/fused_moe/expert_map_manager.py linear: experts 0, 1 and 2, 3
  const std::string w13 = "model.layers.1.mlp.experts.routed_experts.w13_weight";
  const std::string gate = "model.layers.1.mlp.experts.[0:4].gate_proj.weight";
  for (int rank : {0, 2}) EXPECT_FALSE(Holds(l, rank, w13)) << rank;
  auto ep0 = FragmentsIn(l, 1, w13, gate);
  auto ep1 = FragmentsIn(l, 3, w13, gate);
  ASSERT_EQ(ep0.size(), 1u);
  ASSERT_EQ(ep1.size(), 1u);
  EXPECT_EQ(ep0[0].box.lo[0], 0);
  EXPECT_EQ(ep0[0].box.hi[0], 2);
  EXPECT_EQ(ep1[0].box.lo[0], 2);
  EXPECT_EQ(ep1[0].box.hi[0], 4);
  EXPECT_TRUE(Holds(l, 2, "model.layers.0.mlp.experts.routed_experts.w13_weight"));
  Layout members = Build(p, "vllm:pp=2,dp=2,ep=2");
  ExpectCoverage(members, p, [](const std::string& n) {
    if (IsExpert(n)) return 1;
    const bool model_level = n.find(".layers.") == std::string::npos;
    return model_level ? 4 : 2;  // every rank, or each layer's rank in both DP replicas
  });
}

TEST(VllmPipelineLayoutTest, NemotronModelLevelWeightsOnEveryRank) {
  ModelPreset p = Preset("nemotron-h-8b", 1.0 / 16);  // 52 layers: 26 a PP rank
  const Layout stored = BuildAsSpecified(p, "vllm:tp=2,pp=2");
  Layout l = Build(p, "vllm:tp=2,pp=2");
  // vllm/model_executor/models/nemotron_h.py: embed_tokens, norm_f and lm_head on every PP rank
  ExpectCoverage(l, p, [](const std::string& n) {
    const int tp_copies = TpReplicated(n) ? 2 : 1;
    return n.find(".layers.") == std::string::npos ? 2 * tp_copies : tp_copies;
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(Holds(l, rank, "model.norm_f.weight")) << rank;
    EXPECT_EQ(Holds(l, rank, "model.layers.25.norm.weight"), rank < 2) << rank;
  }
  EXPECT_EQ(stored.transforms.size(), 24u);  // A = -exp(A_log), one per Mamba layer
  EXPECT_GE(stored.FindBuffer(3, "model.layers.50.mixer.A"), 0);  // pattern[50] = 'M'
  EXPECT_LT(stored.FindBuffer(1, "model.layers.50.mixer.A"), 0);
}


TEST(VllmPipelineLayoutTest, DeepseekEmbeddingFirstHeadLast) {
  ModelPreset p = PresetOf(TinyDeepseek(/*moe=*/true));
  Layout l = Build(p, "vllm:pp=2,ep=1");
  ExpectCoverage(l, p, Copies(1, 1, 1));
  // vllm/model_executor/models/deepseek_v2.py: embed_tokens first, norm and lm_head last
  EXPECT_TRUE(Holds(l, 0, "model.embed_tokens.weight"));
  EXPECT_FALSE(Holds(l, 1, "model.embed_tokens.weight"));
  EXPECT_FALSE(Holds(l, 0, "lm_head.weight"));
  EXPECT_TRUE(Holds(l, 1, "lm_head.weight"));
  EXPECT_TRUE(Holds(l, 1, "model.layers.1.mlp.experts.routed_experts.w13_weight"));
}

// Four Qwen3-MoE layers of 4 experts (FFN 16), hidden 32, vocabulary 64: two a PP rank of 2.
ModelPreset FourMoeLayers() {
  ModelConfig c = OneLayerConfig("four-moe", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 64);
  c.num_layers = 4;
  c.num_experts = 4;
  c.moe_intermediate = 16;
  return PresetOf(c);
}

std::string W13(int layer) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts.routed_experts.w13_weight";
}
std::string GateStack(int layer) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts.[0:4].gate_proj.weight";
}

// Logical experts (box rows) and local slots of rank `rank`'s gate fragments of `layer`.
void ExpectSlots(const Layout& l, int rank, int layer,
                 const std::vector<std::pair<int64_t, int64_t>>& first_and_count) {
  const int64_t expert = 2 * 16 * 32 * 2;  // one whole expert's w13 bytes, bf16
  auto gate = FragmentsIn(l, rank, W13(layer), GateStack(layer));
  ASSERT_EQ(gate.size(), first_and_count.size()) << "rank " << rank << " layer " << layer;
  int64_t slot = 0;
  for (size_t i = 0; i < gate.size(); ++i) {
    EXPECT_EQ(gate[i].box.lo[0], first_and_count[i].first) << rank << " " << layer << " " << i;
    EXPECT_EQ(gate[i].box.hi[0], first_and_count[i].first + first_and_count[i].second);
    EXPECT_EQ(gate[i].loc.byte_offset, slot * expert) << rank << " " << layer << " " << i;
    slot += first_and_count[i].second;
  }
  EXPECT_EQ(l.buffers[l.FindBuffer(rank, W13(layer))].bytes, 3 * expert);
}

TEST(VllmPipelineLayoutTest, RedundantExpertsOnEachStagesEpGroup) {
  ModelPreset p = FourMoeLayers();
  // tp 2, pp 2, ep = tp*dp = 2, 4 + 2 physical experts, 3 an EP rank, on each PP rank's two ranks
  // (vllm/distributed/parallel_state.py: PP rank 0 is ranks 0, 1; PP rank 1 ranks 2, 3), physical
  // p holding logical p below 4, then p - 4 (eplb_state.py
  // build_initial_global_physical_to_logical_map): EP rank 0 logical 0, 1, 2; EP rank 1 3, 0, 1
  Layout l = BuildAsSpecified(p, "vllm:tp=2,pp=2,ep=2,redundant=2");
  for (int layer = 0; layer < 4; ++layer) {
    const int first = layer < 2 ? 0 : 2;  // get_pp_indices(4, rank, 2): layers 0, 1 and 2, 3
    ExpectSlots(l, first, layer, {{0, 3}});
    ExpectSlots(l, first + 1, layer, {{3, 1}, {0, 2}});
    EXPECT_LT(l.FindBuffer(layer < 2 ? 2 : 0, W13(layer)), 0);
  }
}

TEST(VllmPipelineLayoutTest, EplbMapPerPipelineRank) {
  ModelPreset p = FourMoeLayers();
  // vllm/model_executor/models/qwen3_moe.py: each PP rank's EplbState has a row per MoE layer it
  // builds (num_moe_layers = len(moe_layers)), row i its i-th own MoE layer (set_eplb_state).
  // PP rank 1's row 0 is layer 2: EP rank 0 (rank 2) logical 3, 2, 1; EP rank 1 (rank 3) 0, 1, 2.
  const std::string map = WriteTemp("pp_eplb.json", R"({"pp_ranks": [
      {"physical_to_logical_map": [[0, 1, 2, 3, 0, 1], [1, 0, 3, 2, 0, 1]]},
      [[3, 2, 1, 0, 1, 2], [0, 1, 2, 3, 0, 1]]]})");
  const std::string spec = "vllm:tp=2,pp=2,ep=2,redundant=2,eplb_map=" + map;
  Layout l = BuildAsSpecified(p, spec);
  ExpectSlots(l, 0, 1, {{1, 1}, {0, 1}, {3, 1}});  // PP rank 0, row 1
  ExpectSlots(l, 1, 1, {{2, 1}, {0, 2}});
  ExpectSlots(l, 2, 2, {{3, 1}, {2, 1}, {1, 1}});  // PP rank 1, row 0
  ExpectSlots(l, 3, 2, {{0, 3}});
  ExpectSlots(l, 3, 3, {{3, 1}, {0, 2}});  // PP rank 1, row 1
  Layout members = Build(p, spec);
  // vllm/model_executor/models/qwen3_moe.py: embed_tokens, norm and lm_head on both PP ranks
  ExpectCoverage(members, p, [](const std::string& n) {
    const int tp_copies = TpReplicated(n) ? 2 : 1;
    if (n.find(".layers.") == std::string::npos) return 2 * tp_copies;
    if (!IsExpert(n)) return tp_copies;
    auto has = [&](const std::string& part) { return n.find(part) != std::string::npos; };
    if (has("layers.0.") || has("layers.3.")) return has(".experts.0.") || has(".experts.1.") ? 2 : 1;
    if (has("layers.1.")) return has(".experts.0.") || has(".experts.1.") ? 2 : 1;
    return has(".experts.1.") || has(".experts.2.") ? 2 : 1;  // layer 2
  });
  const FrameworkSpec resolved = ResolveFrameworkSpec(Spec(spec), p.config()).value();
  std::string rules;
  for (const LayoutRule& r :
       RulesForTensor(p.config(), resolved, "model.layers.2.mlp.experts.1.up_proj.weight")) {
    rules += r.rule + " | " + r.upstream + "\n";
  }
  EXPECT_NE(rules.find("from the map of the layer's PP rank"), std::string::npos) << rules;
}

TEST(VllmPipelineLayoutTest, EplbMapsThatDoNotMatchTheStagesRefused) {
  ModelPreset p = FourMoeLayers();
  const std::string row = "[0, 1, 2, 3, 0, 1]";
  const std::pair<std::string, const char*> files[] = {
      {"[" + row + ", " + row + ", " + row + ", " + row + "]", "it holds one map per PP rank"},
      {R"({"pp_ranks": [[)" + row + ", " + row + "]]}", "pp_ranks must list 2 maps"},
      {R"({"pp_ranks": [[)" + row + ", " + row + "], [" + row + "]]}",
       "PP rank 1 has 1 rows; the rank has 2 MoE layers"},
      {R"({"pp_ranks": [[)" + row + ", " + row + "], [" + row + ", [0, 1, 2, 2, 0, 1]]]}",
       "PP rank 1, row 1: logical expert 3 has no physical replica"},
  };
  int n = 0;
  for (const auto& [text, reason] : files) {
    const std::string path = WriteTemp("pp_bad" + std::to_string(n++) + ".json", text);
    Result<Layout> l =
        BuildFrameworkLayout(p, Spec("vllm:tp=2,pp=2,ep=2,redundant=2,eplb_map=" + path));
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_TRUE(Says(l.status(), reason)) << l.status().ToString();
  }
  // vllm/model_executor/models/deepseek_v2.py: num_moe_layers counts the whole model's MoE layers
  // on every PP rank, its expert_weights only the rank's, and rebalance_execute.py
  // rearrange_expert_weights_inplace asserts they are as many
  const ModelConfig ds = TinyDeepseek(/*moe=*/true);
  for (const char* spec : {"vllm:tp=2,pp=2,ep=2,redundant=2", "vllm:tp=2,pp=2,ep=2,eplb_map=/x"}) {
    Status st = ResolveFrameworkSpec(Spec(spec), ds).status();
    EXPECT_TRUE(Says(st, "asserts len(expert_weights) == num_moe_layers")) << st.ToString();
  }
  EXPECT_TRUE(ResolveFrameworkSpec(Spec("vllm:tp=2,ep=2,redundant=2"), ds).ok());
}

// vllm/model_executor/models/qwen3_moe.py Qwen3MoeForCausalLM.__init__ raises when a PP rank
// builds no MoE layer: partition=0.4 leaves PP rank 0 without layers.
TEST(VllmPipelineLayoutTest, Qwen3MoePipelineRankWithoutMoeLayersRefused) {
  const ModelConfig c = FourMoeLayers().config();
  Status st = ResolveFrameworkSpec(Spec("vllm:tp=2,pp=2,partition=0.4"), c).status();
  EXPECT_TRUE(Says(st, "No Qwen3MoE layer found in the model.layers. (PP rank 0 builds no MoE "
                       "layer)"))
      << st.ToString();
  EXPECT_TRUE(ResolveFrameworkSpec(Spec("vllm:tp=2,pp=2,partition=1.3"), c).ok());
}

}  // namespace
}  // namespace ferry::models
