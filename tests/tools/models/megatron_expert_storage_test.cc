// Megatron-Core's expert storage (tools/models/megatron_expert_storage), hand-worked from the
// upstream modules for one MoE layer of 4 experts (FFN 16, hidden 32, bf16) over ep=2: EP rank 1
// (rank 1) owns experts 2 and 3 (megatron/core/transformer/moe/moe_layer.py,
// local_expert_indices_offset = ep_rank * num_local_experts).
//  - SequentialMLP (megatron/core/transformer/moe/experts.py): local_experts.<i> are MLPs with
//    linear_fc1 [2*16, 32] = [gate; up] and linear_fc2 [32, 16];
//  - TEGroupedMLP (megatron/core/extensions/transformer_engine.py TEGroupedLinear): weight<i>;
//  - moe_single_grouped_weight: the per-expert weights stacked on dim 0;
//  - GroupedMLP (experts.py before 2caa681a1d): weight1 [32, 2 * 2*16 / etp] read as
//    weight1.view(2, 32, -1), weight2 [2*16 / etp, 32] read as weight2.view(2, -1, 32).
#include "tools/models/megatron_expert_storage.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

ModelPreset FourExperts() {
  ModelConfig c = OneLayerConfig("four-experts", ModelFamily::kQwen3Moe, 32, 4, 4, 8, 256);
  c.num_experts = 4;
  c.moe_intermediate = 16;
  return PresetOf(c);
}

const std::string kExperts = "decoder.layers.0.mlp.experts.";
const std::string kGate3 = "model.layers.0.mlp.experts.3.gate_proj.weight";
const std::string kUp3 = "model.layers.0.mlp.experts.3.up_proj.weight";
const std::string kDown3 = "model.layers.0.mlp.experts.3.down_proj.weight";

struct Expected {
  std::string buffer;
  int64_t byte_offset;
  std::array<int64_t, 2> strides;
};

void ExpectAt(const Layout& l, const std::string& tensor, const Expected& e, int rank = 1) {
  SCOPED_TRACE(tensor + " in " + e.buffer);
  auto f = FragmentsIn(l, rank, kExperts + e.buffer, tensor);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].loc.byte_offset, e.byte_offset);
  EXPECT_EQ(f[0].loc.strides[0], e.strides[0]);
  EXPECT_EQ(f[0].loc.strides[1], e.strides[1]);
}

// Both ways of naming experts (stacks expanded, and members) give the same placement.
void ExpectExpert3(const std::string& spec, const Expected& gate, const Expected& up,
                   const Expected& down, int64_t fc1_bytes) {
  ModelPreset p = FourExperts();
  for (const std::string& s : {spec, spec + ",expert_tensors=members"}) {
    SCOPED_TRACE(s);
    Layout l = Build(p, s);
    ExpectCoverage(l, p, Copies(2, 1, 1));
    ExpectAt(l, kGate3, gate);
    ExpectAt(l, kUp3, up);
    ExpectAt(l, kDown3, down);
    EXPECT_EQ(l.buffers[l.FindBuffer(1, kExperts + gate.buffer)].bytes, fc1_bytes);
  }
}

TEST(MegatronExpertStorageTest, SequentialMlpIsTheDefault) {
  const std::string fc1 = "local_experts.1.linear_fc1.weight";
  ExpectExpert3("megatron:ep=2", {fc1, 0, {32, 1}}, {fc1, 16 * 32 * 2, {32, 1}},
                {"local_experts.1.linear_fc2.weight", 0, {16, 1}}, 2 * 16 * 32 * 2);
}

TEST(MegatronExpertStorageTest, TeGroupedMlpWeightPerExpert) {
  ExpectExpert3("megatron:ep=2,experts=grouped", {"linear_fc1.weight1", 0, {32, 1}},
                {"linear_fc1.weight1", 16 * 32 * 2, {32, 1}}, {"linear_fc2.weight1", 0, {16, 1}},
                2 * 16 * 32 * 2);
}

TEST(MegatronExpertStorageTest, SingleGroupedWeight) {
  const int64_t expert = 2 * 16 * 32 * 2;  // bytes of one expert's fc1
  ExpectExpert3("megatron:ep=2,experts=single_grouped", {"linear_fc1.weight", expert, {32, 1}},
                {"linear_fc1.weight", expert + 16 * 32 * 2, {32, 1}},
                {"linear_fc2.weight", 32 * 16 * 2, {16, 1}}, 2 * expert);
}

TEST(MegatronExpertStorageTest, LegacyGroupedMlpTransposed) {
  // weight1.view(2, 32, 32): local expert 1 at element 32*32; gate[j][h] at h*32 + j, up's
  // columns after gate's 16. weight2.view(2, 16, 32): down[h][j] at 16*32 + j*32 + h.
  ExpectExpert3("megatron:ep=2,experts=legacy_grouped", {"weight1", 32 * 32 * 2, {1, 32}},
                {"weight1", (32 * 32 + 16) * 2, {1, 32}}, {"weight2", 16 * 32 * 2, {1, 32}},
                2 * 32 * 32 * 2);
}

TEST(MegatronExpertStorageTest, LegacyGroupedMlpWithExpertTensorParallel) {
  // tp=etp=2, ep=2: rank 3 = EP rank 1, ETP shard 1 (experts 2 and 3, FFN rows 8..15).
  // GroupedMLP: weight1 [32, 2*16*2 / 2] read as view(2, 32, 16), each expert's 16 columns
  // chunked into [gate shard; up shard] (glu's torch.chunk(x, 2, dim=-1); sharded_state_dict
  // puts them at tp_rank and tp_rank + tp of 2*tp pieces); weight2 [2*16 / 2, 32] as
  // view(2, 8, 32).
  // Expert 3 = local 1: gate[8 + j][h] at 32*16 + h*16 + j, up 8 further, down[h][8 + j] at
  // 8*32 + j*32 + h.
  ModelPreset p = FourExperts();
  Layout l = Build(p, "megatron:tp=2,ep=2,etp=2,experts=legacy_grouped");
  ExpectCoverage(l, p, Copies(2, 2, 1));
  ExpectAt(l, kGate3, {"weight1", 32 * 16 * 2, {1, 16}}, 3);
  ExpectAt(l, kUp3, {"weight1", (32 * 16 + 8) * 2, {1, 16}}, 3);
  ExpectAt(l, kDown3, {"weight2", 8 * 32 * 2, {1, 32}}, 3);
  auto gate = FragmentsIn(l, 3, kExperts + "weight1", kGate3);
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 8);
  EXPECT_EQ(gate[0].box.hi[0], 16);
  EXPECT_EQ(l.buffers[l.FindBuffer(3, kExperts + "weight1")].bytes, 32 * 32 * 2);
}

TEST(MegatronExpertStorageTest, ExpertTensorParallelShard) {
  // tp=etp=2, ep=2: dp 2, four ranks a stage; rank 3 = EP rank 1, ETP shard 1: rows 8..15 of
  // experts 2 and 3, local expert 0 = expert 2.
  ModelPreset p = FourExperts();
  Layout l = Build(p, "megatron:tp=2,ep=2");
  auto gate = FragmentsIn(l, 3, kExperts + "local_experts.0.linear_fc1.weight",
                          "model.layers.0.mlp.experts.2.gate_proj.weight");
  auto up = FragmentsIn(l, 3, kExperts + "local_experts.0.linear_fc1.weight",
                        "model.layers.0.mlp.experts.2.up_proj.weight");
  auto down = FragmentsIn(l, 3, kExperts + "local_experts.0.linear_fc2.weight",
                          "model.layers.0.mlp.experts.2.down_proj.weight");
  ASSERT_EQ(gate.size(), 1u);
  ASSERT_EQ(up.size(), 1u);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 8);
  EXPECT_EQ(gate[0].box.hi[0], 16);
  EXPECT_EQ(up[0].loc.byte_offset, 8 * 32 * 2);
  EXPECT_EQ(down[0].box.lo[1], 8);
  EXPECT_EQ(down[0].loc.strides[0], 8);
}

}  // namespace
}  // namespace ferry::models
