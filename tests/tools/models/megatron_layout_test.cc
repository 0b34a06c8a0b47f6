// Tests for tools/models/megatron_layout (through BuildFrameworkLayout): hand-checked fragments of
// Megatron layouts (QKV interleave, gate_up, pipeline stages, expert ownership and replication,
// MLA, Mamba) and exact coverage of every tensor.
#include "tools/models/megatron_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

TEST(MegatronLayoutTest, LlamaQkvInterleaveGateUpAndStages) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);  // hidden 64, 32 heads, 8 kv, head_dim 2
  ASSERT_EQ(p.config().hidden, 64);
  ASSERT_EQ(p.config().intermediate, 224);
  Layout l = Build(p, "megatron:tp=2,pp=2,dp=2");
  EXPECT_EQ(l.Ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  ExpectCoverage(l, p, Copies(2, 2, 0));

  // linear_qkv on TP rank 1: groups 4..7; group rows = 4 q heads * 2 + k 2 + v 2 = 12 rows of 64.
  const std::string qkv = "decoder.layers.0.self_attention.linear_qkv.weight";
  auto q = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.q_proj.weight");
  auto k = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.k_proj.weight");
  auto v = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.v_proj.weight");
  ASSERT_EQ(q.size(), 4u);
  ASSERT_EQ(k.size(), 4u);
  ASSERT_EQ(v.size(), 4u);
  const int64_t row = 64 * 2;  // bytes
  EXPECT_EQ(q[0].box.lo[0], 32);
  EXPECT_EQ(q[0].box.hi[0], 40);
  EXPECT_EQ(q[0].loc.byte_offset, 0);
  EXPECT_EQ(k[0].box.lo[0], 8);
  EXPECT_EQ(k[0].loc.byte_offset, 8 * row);
  EXPECT_EQ(v[0].loc.byte_offset, 10 * row);
  EXPECT_EQ(q[1].box.lo[0], 40);
  EXPECT_EQ(q[1].loc.byte_offset, 12 * row);
  EXPECT_EQ(v[3].box.lo[0], 14);
  EXPECT_EQ(v[3].loc.byte_offset, (3 * 12 + 10) * row);
  EXPECT_EQ(l.buffers[l.FindBuffer(1, qkv)].bytes, 48 * row);

  // linear_fc1 on TP rank 1 = [gate rows 112..223; up rows 112..223].
  const std::string fc1 = "decoder.layers.0.mlp.linear_fc1.weight";
  auto gate = FragmentsIn(l, 1, fc1, "model.layers.0.mlp.gate_proj.weight");
  auto up = FragmentsIn(l, 1, fc1, "model.layers.0.mlp.up_proj.weight");
  ASSERT_EQ(gate.size(), 1u);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 112);
  EXPECT_EQ(gate[0].loc.byte_offset, 0);
  EXPECT_EQ(up[0].box.lo[0], 112);
  EXPECT_EQ(up[0].loc.byte_offset, 112 * row);
  // linear_fc2 (down, row-parallel) on TP rank 1: columns 112..223.
  auto down = FragmentsIn(l, 1, "decoder.layers.0.mlp.linear_fc2.weight",
                          "model.layers.0.mlp.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].box.lo[1], 112);
  EXPECT_EQ(down[0].box.hi[1], 224);

  // Stage 1 = ranks 4..7 holds layers 16..31 under local numbers, the output layer, no embedding.
  EXPECT_EQ(FragmentsIn(l, 6, "decoder.layers.0.self_attention.linear_proj.weight",
                        "model.layers.16.self_attn.o_proj.weight").size(), 1u);
  EXPECT_EQ(l.FindBuffer(4, "embedding.word_embeddings.weight"), -1);
  EXPECT_GE(l.FindBuffer(4, "output_layer.weight"), 0);
  EXPECT_GE(l.FindBuffer(2, "embedding.word_embeddings.weight"), 0);  // DP replica 1 of stage 0
  EXPECT_EQ(l.FindBuffer(0, "decoder.layers.16.self_attention.linear_proj.weight"), -1);
}

TEST(MegatronLayoutTest, FirstRankOffsetsEveryRank) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = Build(p, "megatron:tp=2,pp=2", 10);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{10, 11, 12, 13}));
}

TEST(MegatronLayoutTest, MoeExpertOwnershipAndReplication) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);  // 128 experts, moe_intermediate 16
  // tp=2, ep=4, etp=1: dp = lcm(2, 4) / 2 = 2, 4 ranks a stage, expert-dp 1.
  Layout l = Build(p, "megatron:tp=2,pp=2,ep=4,etp=1,experts=single_grouped");
  EXPECT_EQ(l.Ranks().size(), 8u);
  ExpectCoverage(l, p, Copies(2, 2, 1));
  // Expert 40 of layer 3 (stage 0): EP rank 1 (experts 32..63), local index 8, on rank 1. The
  // local experts are stacked in one buffer: [gate; up] of 2 x 16 rows of 32 columns each.
  const int64_t fc1_bytes = 2 * 16 * 32 * 2;
  auto e = FragmentsIn(l, 1, "decoder.layers.3.mlp.experts.linear_fc1.weight",
                       "model.layers.3.mlp.experts.40.up_proj.weight");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].loc.byte_offset, 8 * fc1_bytes + 16 * 32 * 2);  // after expert 8's gate rows
  EXPECT_TRUE(FragmentsIn(l, 0, "decoder.layers.3.mlp.experts.linear_fc1.weight",
                          "model.layers.3.mlp.experts.40.up_proj.weight").empty());
  // Layer 24 is local layer 0 of stage 1 (ranks 4..7): expert 127 on EP rank 3 = rank 7, local 31.
  auto down = FragmentsIn(l, 7, "decoder.layers.0.mlp.experts.linear_fc2.weight",
                          "model.layers.24.mlp.experts.127.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].loc.byte_offset, 31 * 32 * 16 * 2);
  // experts=grouped: one buffer per local expert.
  Layout separate = Build(p, "megatron:tp=2,pp=2,ep=4,etp=1,experts=grouped");
  ExpectCoverage(separate, p, Copies(2, 2, 1));
  auto own = FragmentsIn(separate, 1, "decoder.layers.3.mlp.experts.linear_fc1.weight8",
                         "model.layers.3.mlp.experts.40.up_proj.weight");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].loc.byte_offset, 16 * 32 * 2);
  EXPECT_EQ(FragmentsIn(separate, 7, "decoder.layers.0.mlp.experts.linear_fc2.weight31",
                        "model.layers.24.mlp.experts.127.down_proj.weight").size(), 1u);
  // With etp=2 each expert FFN is split over 2 ranks and expert-dp is 2.
  Layout etp = Build(p, "megatron:tp=2,ep=2,etp=2,dp=4,experts=single_grouped");
  ExpectCoverage(etp, p, Copies(4, 2, 2));
  auto half = FragmentsIn(etp, 1, "decoder.layers.0.mlp.experts.linear_fc1.weight",
                          "model.layers.0.mlp.experts.0.gate_proj.weight");
  ASSERT_EQ(half.size(), 1u);
  EXPECT_EQ(half[0].box.lo[0], 8);
  EXPECT_EQ(half[0].box.hi[0], 16);
}

TEST(MegatronLayoutTest, DeepseekAndNemotronCoverage) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  Layout l = Build(ds, "megatron:tp=2,pp=4,first=16,last=15,ep=8,etp=1");  // dp 4, expert-dp 1
  ExpectCoverage(l, ds, Copies(4, 2, 1));
  EXPECT_GE(l.FindBuffer(0, "decoder.layers.0.self_attention.linear_kv_up_proj.weight"), 0);
  EXPECT_GE(l.FindBuffer(0, "decoder.layers.3.mlp.shared_experts.linear_fc1.weight"), 0);

  ModelPreset nh = Preset("nemotron-h-8b", 1.0 / 16);
  Layout m = Build(nh, "megatron:tp=2,pp=2,cp=2");
  ExpectCoverage(m, nh, Copies(2, 2, 0));  // CP ranks hold replicas
  // in_proj on TP rank 1 = [z_1; x_1; B_1; C_1; dt_1].
  const ModelConfig& c = nh.config();
  const int64_t di = c.MambaInner(), gs = c.mamba_groups * c.ssm_state_size;
  auto in = FragmentsIn(m, 1, "decoder.layers.0.mixer.in_proj.weight",
                        "backbone.layers.0.mixer.in_proj.weight");
  ASSERT_EQ(in.size(), 5u);
  EXPECT_EQ(in[0].box.lo[0], di / 2);
  EXPECT_EQ(in[1].box.lo[0], di + di / 2);
  EXPECT_EQ(in[2].box.lo[0], 2 * di + gs / 2);
  EXPECT_EQ(in[3].box.lo[0], 2 * di + gs + gs / 2);
  EXPECT_EQ(in[4].box.lo[0], 2 * di + 2 * gs + c.mamba_num_heads / 2);
  EXPECT_EQ(in[4].loc.byte_offset, (di + gs) * c.hidden * 2);
}

}  // namespace
}  // namespace ferry::models
