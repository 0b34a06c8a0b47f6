// Tests for tools/models/vllm_layout (through BuildFrameworkLayout): hand-checked fragments of vLLM
// layouts (qkv_proj, gate_up_proj, replicated KV heads, stacked w13, expert parallelism, engines,
// MLA, Mamba) and exact coverage of every tensor.
#include "tools/models/vllm_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

TEST(VllmLayoutTest, LlamaQkvGateUpAndDpReplicas) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = Build(p, "vllm:tp=2,dp=2", 8);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{8, 9, 10, 11}));
  ExpectCoverage(l, p, Copies(2, 2, 0));
  const std::string qkv = "model.layers.5.self_attn.qkv_proj.weight";
  const int64_t row = 64 * 2;
  auto q = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.q_proj.weight");
  auto k = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.k_proj.weight");
  auto v = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.v_proj.weight");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].box.lo[0], 32);  // 16 heads * 2 rows per TP rank
  EXPECT_EQ(k[0].box.lo[0], 8);   // KV heads 4..7
  EXPECT_EQ(k[0].loc.byte_offset, 32 * row);
  EXPECT_EQ(v[0].loc.byte_offset, 40 * row);
  auto up = FragmentsIn(l, 9, "model.layers.5.mlp.gate_up_proj.weight", "model.layers.5.mlp.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 112);
  EXPECT_EQ(up[0].loc.byte_offset, 112 * row);
}

TEST(VllmLayoutTest, KvHeadsReplicatedWhenTpExceedsThem) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);  // 8 KV heads
  Layout l = Build(p, "vllm:tp=16");
  auto kv_replicas = [](const std::string& n) {
    if (TpReplicated(n)) return 16;
    return n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos ? 2 : 1;
  };
  ExpectCoverage(l, p, kv_replicas);
  auto k5 = FragmentsIn(l, 5, "model.layers.0.self_attn.qkv_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight");
  ASSERT_EQ(k5.size(), 1u);
  EXPECT_EQ(k5[0].box.lo[0], 2 * 2);  // rank 5 -> KV head 2 (head_dim 2)
  EXPECT_EQ(k5[0].box.hi[0], 3 * 2);
}

TEST(VllmLayoutTest, MoeStackedW13AndExpertParallel) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);  // hidden 32, moe_intermediate 16
  Layout ep = Build(p, "vllm:tp=2,dp=2,ep=4");
  ExpectCoverage(ep, p, Copies(2, 2, 1));
  // Rank 2 owns experts 64..95; local expert 5 = expert 69 at 5 * (2*16*32) elements.
  const std::string w13 = "model.layers.7.mlp.experts.routed_experts.w13_weight";
  auto up = FragmentsIn(ep, 2, w13, "model.layers.7.mlp.experts.69.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].loc.byte_offset, (5 * 2 * 16 * 32 + 16 * 32) * 2);
  EXPECT_EQ(ep.buffers[ep.FindBuffer(2, w13)].bytes, 32 * 2 * 16 * 32 * 2);
  auto w2 = FragmentsIn(ep, 2, "model.layers.7.mlp.experts.routed_experts.w2_weight",
                        "model.layers.7.mlp.experts.69.down_proj.weight");
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0].loc.byte_offset, 5 * 32 * 16 * 2);
  // ep=1: every rank holds every expert, its FFN split 4 ways.
  Layout tp = Build(p, "vllm:tp=2,dp=2");
  ExpectCoverage(tp, p, Copies(2, 2, 1));
  auto g = FragmentsIn(tp, 3, "model.layers.0.mlp.experts.routed_experts.w13_weight",
                       "model.layers.0.mlp.experts.127.gate_proj.weight");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].box.lo[0], 12);
  EXPECT_EQ(g[0].box.hi[0], 16);
}

TEST(VllmLayoutTest, EnginesAreWholeIndependentCopies) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  Layout one = Build(p, "vllm:tp=2,dp=2,ep=4");
  Layout three = Build(p, "vllm:tp=2,dp=2,ep=4,engines=3");
  // Each engine holds every expert once and everything else once per DP replica.
  auto copies = Copies(2, 2, 1);
  ExpectCoverage(three, p, [&](const std::string& n) { return 3 * copies(n); });
  EXPECT_EQ(three.fragments.size(), 3 * one.fragments.size());
  EXPECT_EQ(three.Ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // Engine 2's rank 10 mirrors engine 0's rank 2: experts 64..95 of layer 7 in the same place.
  const std::string w13 = "model.layers.7.mlp.experts.routed_experts.w13_weight";
  const std::string up = "model.layers.7.mlp.experts.69.up_proj.weight";
  auto first = FragmentsIn(three, 2, w13, up);
  auto third = FragmentsIn(three, 10, w13, up);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].box, first[0].box);
  EXPECT_EQ(third[0].loc.byte_offset, first[0].loc.byte_offset);
  EXPECT_EQ(Spec("vllm:tp=2,dp=2,ep=4,engines=3").ToString(), "vllm:tp=2,dp=2,ep=4,engines=3");
  EXPECT_EQ(NumRanks(Spec("vllm:tp=2,dp=2,ep=4,engines=3")), 12);
}

TEST(VllmLayoutTest, DeepseekAndNemotronCoverage) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  Layout l = Build(ds, "vllm:tp=4,dp=2,ep=8");
  // EP with tp > 1 and dp > 1 is sequence-parallel MoE: the shared experts whole on all 8 ranks
  // (vllm/config/parallel.py use_sequence_parallel_moe, deepseek_v2.py DeepseekV2MLP disable_tp)
  ExpectCoverage(l, ds, [](const std::string& n) {
    return n.find(".mlp.shared_experts.") != std::string::npos ? 8 : Copies(2, 4, 1)(n);
  });
  auto kv_a = FragmentsIn(l, 0, "model.layers.0.self_attn.fused_qkv_a_proj.weight",
                          "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kv_a.size(), 1u);
  EXPECT_EQ(kv_a[0].loc.byte_offset, ds.config().q_lora_rank * ds.config().hidden * 2);
  ModelPreset nh = Preset("nemotron-h-8b", 1.0 / 16);
  Layout m = Build(nh, "vllm:tp=4,dp=2");
  ExpectCoverage(m, nh, Copies(2, 4, 0));
  // vllm/model_executor/layers/mamba/mamba_mixer2.py: A = -exp(A_log), fp32, heads / tp values.
  const int a = m.FindBuffer(0, "model.layers.0.mixer.A");
  ASSERT_GE(a, 0);
  EXPECT_EQ(m.buffers[a].bytes, nh.config().mamba_num_heads / 4 * 4);
  const Layout stored = BuildAsSpecified(nh, "vllm:tp=4,dp=2");
  ASSERT_EQ(stored.transforms.size(), 24u);  // one per Mamba layer
  EXPECT_EQ(stored.tensors[stored.transforms[0].tensor].name, "backbone.layers.0.mixer.A_log");
  EXPECT_EQ(stored.transforms[0].stored_dtype, DType::kFP32);
  RefitLayouts refit =
      BuildRefitLayouts(nh, Spec("megatron:tp=2"), Spec("vllm:tp=4,dp=2")).value();
  Status refused = CheckNoStoredTransforms(refit.source, refit.destination);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("'backbone.layers.0.mixer.A_log' is stored as A = -exp(A_log)"),
            std::string::npos)
      << refused.message();
  EXPECT_TRUE(refit.source.transforms.empty());  // Megatron keeps A_log as the checkpoint does
}

}  // namespace
}  // namespace ferry::models
