// Tests for tools/models/sglang_pipeline and the SGLang layouts with pp > 1, worked by hand from
// SGLang 0.5.23's python/sglang/srt: layers per PP rank (distributed/utils.py get_pp_indices, the
// remainder on the last ranks), which PP ranks hold embed_tokens, the final norm and lm_head per
// model class (models/llama.py, qwen2.py, qwen3.py, qwen3_moe.py, deepseek_v2.py), the world rank
// tp * pp_rank + tp_rank (runtime_context.py spawn_world_rank), and what is refused.
#include "tools/models/sglang_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

// `layers` decoder layers: hidden 8, 2 heads and 2 KV heads of 4, FFN 16, vocabulary 64 (SGLang
// pads it to 64: 32 rows a TP rank of 2). `qwen3`: q/k norms, which make it SGLang's Qwen3 class
// rather than Llama's.
ModelPreset TinyDense(int64_t layers, bool tied, bool qwen3) {
  ModelConfig c = OneLayerConfig("tiny-dense", ModelFamily::kLlama, 8, 2, 2, 4, 64);
  c.num_layers = layers;
  c.intermediate = 16;
  c.tie_embeddings = tied;
  c.qk_norm = qwen3;
  return PresetOf(c);
}

std::vector<int64_t> Split(int64_t layers, int pp, const std::vector<int>& partition = {}) {
  Result<std::vector<int64_t>> r = SglangPipelineLayers(layers, pp, partition);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<int64_t>{};
}

std::string Rules(const ModelPreset& p, const std::string& spec, const std::string& tensor) {
  const FrameworkSpec resolved = ResolveFrameworkSpec(Spec(spec), p.config()).value();
  std::string text;
  for (const LayoutRule& r : RulesForTensor(p.config(), resolved, tensor)) {
    text += r.rule + " | " + r.upstream + "\n";
  }
  return text;
}

TEST(SglangPipelineTest, LayersPerRankFollowGetPpIndices) {
  // get_pp_indices: layers // pp each, "the last N partitions will have one extra layer"
  EXPECT_EQ(Split(5, 2), (std::vector<int64_t>{2, 3}));        // vLLM: 3, 2
  EXPECT_EQ(Split(5, 3), (std::vector<int64_t>{1, 2, 2}));     // vLLM: 2, 2, 1
  EXPECT_EQ(Split(6, 4), (std::vector<int64_t>{1, 1, 2, 2}));  // vLLM: 1, 2, 2, 1
  EXPECT_EQ(Split(7, 4), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(Split(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(Split(61, 2), (std::vector<int64_t>{30, 31}));  // DeepSeek-V3
  // SGLANG_PP_LAYER_PARTITION="1,4" taken as given; with pp_size 1 it is ignored
  EXPECT_EQ(Split(5, 2, {1, 4}), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(Split(5, 1, {3, 3}), (std::vector<int64_t>{5}));
}

TEST(SglangPipelineTest, PartitionAndPpRejectedWithSglangsReason) {
  Status sum = SglangPipelineLayers(5, 2, {3, 3}).status();
  EXPECT_TRUE(Says(sum, "SGLANG_PP_LAYER_PARTITION (partition=3.3): sum(partitions)=6 does not "
                        "match num_hidden_layers=5."))
      << sum.ToString();
  Status len = SglangPipelineLayers(5, 2, {1, 2, 2}).status();
  EXPECT_TRUE(Says(len, "len(partitions)=3 does not match pp_size=2.")) << len.ToString();
  // utils/common.py make_layers: assert num_hidden_layers >= pp_size
  Status few = SglangPipelineLayers(2, 3, {}).status();
  EXPECT_TRUE(Says(few, "num_hidden_layers >= pp_size")) << few.ToString();
  Result<FrameworkSpec> bad = ParseFrameworkSpec("sglang:tp=2,pp=2,partition=3.x");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Says(bad.status(), "SGLANG_PP_LAYER_PARTITION=3,2")) << bad.status().ToString();
  Result<Layout> too_many = BuildFrameworkLayout(TinyDense(2, false, false), Spec("sglang:pp=3"));
  ASSERT_FALSE(too_many.ok());
  EXPECT_TRUE(Says(too_many.status(), "pp=3 exceeds the model's 2 layers"));
  // models/deepseek_v2.py: a tied DeepSeek model's last-rank lm_head is never loaded with pp > 1
  ModelConfig tied = TinyDeepseek(true);
  tied.tie_embeddings = true;
  tied.nextn_layers = 0;
  Result<Layout> ds = BuildFrameworkLayout(PresetOf(tied), Spec("sglang:tp=2,pp=2"));
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Says(ds.status(), "leaves the last PP rank's lm_head unloaded"));
  EXPECT_TRUE(BuildFrameworkLayout(PresetOf(tied), Spec("sglang:tp=2")).ok());
}

TEST(SglangPipelineTest, SpecKeepsPpAndPartition) {
  const std::string text = "sglang:tp=2,pp=2,partition=1.4,dp=1,ep=1";
  EXPECT_EQ(Spec(text).ToString(), text);
  // get_pp_indices ignores the partition with pp_size 1: resolving drops it
  const FrameworkSpec one =
      ResolveFrameworkSpec(Spec("sglang:tp=2,partition=5"), TinyDense(5, false, false).config())
          .value();
  EXPECT_EQ(one.ToString(), "sglang:tp=2,dp=1,ep=1");
  EXPECT_EQ(NumRanks(Spec("sglang:tp=2,pp=3,dp=2,engines=2")), 24);
}

// models/llama.py LlamaForCausalLM: ParallelLMHead built and loaded on every PP rank.
TEST(SglangPipelineLayoutTest, LlamaHoldsLmHeadOnEveryPpRank) {
  ModelPreset p = TinyDense(5, false, false);
  Layout l = Build(p, "sglang:tp=2,pp=2");
  EXPECT_EQ(l.Ranks(), (std::vector<int>{0, 1, 2, 3}));
  ExpectCoverage(l, p, [](const std::string& n) {
    if (n == "lm_head.weight") return 2;  // once per PP rank
    return TpReplicated(n) ? 2 : 1;
  });
  // PP rank 0 (ranks 0, 1): layers 0, 1; PP rank 1 (ranks 2, 3): layers 2..4
  for (int layer = 0; layer < 5; ++layer) {
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(Holds(l, rank, Qkv(layer)), (layer < 2) == (rank < 2)) << layer << " " << rank;
    }
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(Holds(l, rank, "model.embed_tokens.weight"), rank < 2);
    EXPECT_EQ(Holds(l, rank, "model.norm.weight"), rank >= 2);
    EXPECT_TRUE(Holds(l, rank, "lm_head.weight"));
  }
  for (int rank : {1, 3}) {  // TP rank 1 of either stage: rows 32..63
    auto head = FragmentsIn(l, rank, "lm_head.weight", "lm_head.weight");
    ASSERT_EQ(head.size(), 1u);
    EXPECT_EQ(head[0].box.lo[0], 32);
    EXPECT_EQ(head[0].box.hi[0], 64);
  }
  EXPECT_NE(Rules(p, "sglang:tp=2,pp=2", "lm_head.weight").find("lm_head on every PP rank"),
            std::string::npos);
  EXPECT_NE(Rules(p, "sglang:tp=2,pp=2", Qkv(2).substr(0, Qkv(2).find("qkv")) + "q_proj.weight")
                .find("decoder layer 2 on PP rank 1"),
            std::string::npos);
  // Tied, lm_head is embed_tokens, a PPMissingLayer past the first rank: no lm_head anywhere.
  Layout tied = Build(TinyDense(5, true, false), "sglang:tp=2,pp=2");
  for (int rank = 0; rank < 4; ++rank) EXPECT_FALSE(Holds(tied, rank, "lm_head.weight"));
}

// models/qwen3.py (qwen2.py alike): lm_head on the last PP rank only; tied with pp > 1 it is the
// last rank's own, loaded from model.embed_tokens.weight.
TEST(SglangPipelineLayoutTest, QwenTiedLastRankLoadsLmHeadFromTheEmbedding) {
  ModelPreset p = TinyDense(4, true, true);
  Layout l = Build(p, "sglang:tp=2,pp=2");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (n == "model.embed_tokens.weight") return 2;  // embed_tokens, and the last rank's lm_head
    return TpReplicated(n) || n.find("_norm") != std::string::npos ? 2 : 1;
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(Holds(l, rank, "model.embed_tokens.weight"), rank < 2);
    EXPECT_EQ(Holds(l, rank, "lm_head.weight"), rank >= 2);
  }
  auto head = FragmentsIn(l, 3, "lm_head.weight", "model.embed_tokens.weight");
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].box.lo[0], 32);
  EXPECT_NE(Rules(p, "sglang:tp=2,pp=2", "model.embed_tokens.weight")
                .find("the last PP rank's own lm_head, loaded from embed_tokens"),
            std::string::npos);
  // pp 1: tied lm_head is embed_tokens, no buffer of its own
  Layout one = Build(p, "sglang:tp=2");
  EXPECT_FALSE(Holds(one, 0, "lm_head.weight"));
}

// models/qwen3_moe.py: lm_head on every PP rank; each stage's FusedMoE over its own tp ranks.
TEST(SglangPipelineLayoutTest, Qwen3MoeExpertsOverEachStagesTpRanks) {
  ModelConfig c = OneLayerConfig("two-moe", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 64);
  c.num_layers = 2;
  c.num_experts = 4;
  c.moe_intermediate = 16;
  c.qk_norm = true;
  ModelPreset p = PresetOf(c);
  Layout l = Build(p, "sglang:tp=2,pp=2,ep=2");
  for (int rank = 0; rank < 4; ++rank) EXPECT_TRUE(Holds(l, rank, "lm_head.weight")) << rank;
  // layer 1 on PP rank 1 (ranks 2, 3); EP rank tp_rank / 1: rank 3 holds experts 2 and 3
  const std::string w13 = "model.layers.1.mlp.experts.w13_weight";
  for (int rank : {0, 1}) EXPECT_FALSE(Holds(l, rank, w13)) << rank;
  EXPECT_TRUE(FragmentsIn(l, 3, w13, "model.layers.1.mlp.experts.1.gate_proj.weight").empty());
  auto e3 = FragmentsIn(l, 3, w13, "model.layers.1.mlp.experts.3.gate_proj.weight");
  ASSERT_EQ(e3.size(), 1u);
  EXPECT_EQ(e3[0].loc.byte_offset, 1 * (2 * 16 * 32) * 2);  // local expert 1
}

// models/deepseek_v2.py: lm_head on the last PP rank; DP replicas and engines each a whole
// tp * pp block (managers/data_parallel_controller.py: base_gpu_id += tp * pp).
TEST(SglangPipelineLayoutTest, DeepseekReplicasAreWholePpBlocks) {
  ModelPreset p = PresetOf(TinyDeepseek(true));
  Layout l = Build(p, "sglang:tp=2,pp=2,dp=2");
  EXPECT_EQ(l.Ranks().size(), 8u);
  for (int rank = 0; rank < 8; ++rank) {
    const int pp_rank = rank / 2 % 2;
    EXPECT_EQ(Holds(l, rank, "model.embed_tokens.weight"), pp_rank == 0) << rank;
    EXPECT_EQ(Holds(l, rank, "lm_head.weight"), pp_rank == 1) << rank;
    EXPECT_EQ(Holds(l, rank, "model.layers.1.mlp.experts.w13_weight"), pp_rank == 1) << rank;
  }
}

}  // namespace
}  // namespace ferry::models
