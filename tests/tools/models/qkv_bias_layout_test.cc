// Qwen2's q/k/v biases (ModelConfig::qkv_bias) in the Megatron and vLLM layouts, each fragment's
// place worked by hand from the upstream code:
//  * Megatron-Core's linear_qkv.bias, interleaved per query group as the weight's rows
//    (megatron/core/transformer/attention.py SelfAttention, add_qkv_bias;
//    Megatron-Bridge src/megatron/bridge/models/conversion/param_mapping.py merge_qkv_biases),
//    its TP shard the groups of the rank, and its place in the distributed optimizer's buffer
//    right after linear_qkv.weight (Transformer Engine's
//    transformer_engine/pytorch/module/layernorm_linear.py registers weight, then bias);
//  * vLLM's qkv_proj.bias, [q shard; KV shard; KV shard] per TP rank, the KV shard
//    tp_rank // num_kv_head_replicas (vllm/model_executor/layers/linear.py
//    QKVParallelLinear.weight_loader, vllm/model_executor/models/qwen2.py bias=True).
// Qwen2.5-7B is read from its published config.json: 28 heads and 4 KV heads of 128, so 7 query
// heads a group, a group 7*128 + 2*128 = 1152 rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/hf_config.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

// Qwen2.5-7B at `scale` (full size by default; every element's coverage is counted on 1/64).
ModelPreset Qwen25SevenB(double scale = 1.0) {
  Result<ModelPreset> p = MakeModel("tests/tools/models/testdata/hf/Qwen2.5-7B", scale);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

std::string Layer3(const std::string& suffix) { return "model.layers.3.self_attn." + suffix; }

struct Expected {
  std::string tensor;
  int64_t lo, hi, byte_offset;
};

// The fragments of q, k and v biases in `buffer` on `rank` are exactly `want`, in that order.
void ExpectBiasFragments(const Layout& l, int rank, const std::string& buffer,
                         const std::vector<Expected>& want) {
  std::vector<Fragment> got;
  for (const char* proj : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
    for (const Fragment& f : FragmentsIn(l, rank, buffer, Layer3(proj))) got.push_back(f);
  }
  ASSERT_EQ(got.size(), want.size()) << buffer << " on rank " << rank;
  // FragmentsIn lists q's, then k's, then v's; `want` is in buffer order, so match by offset.
  for (const Expected& w : want) {
    bool found = false;
    for (const Fragment& f : got) {
      if (f.loc.byte_offset != w.byte_offset) continue;
      found = true;
      EXPECT_EQ(l.tensors[static_cast<size_t>(f.tensor)].name, Layer3(w.tensor));
      EXPECT_EQ(f.box.lo[0], w.lo) << w.tensor << " at " << w.byte_offset;
      EXPECT_EQ(f.box.hi[0], w.hi) << w.tensor << " at " << w.byte_offset;
    }
    EXPECT_TRUE(found) << w.tensor << " at byte " << w.byte_offset;
  }
}

int64_t BufferBytes(const Layout& l, int rank, const std::string& buffer) {
  const int b = l.FindBuffer(rank, buffer);
  return b < 0 ? -1 : l.buffers[static_cast<size_t>(b)].bytes;
}

// Megatron TP2: rank 1 holds query groups 2 and 3, 2 * 1152 bias values (4608 bytes). Group 2 at
// row 0: q rows [2*896, 3*896) then k and v rows [2*128, 3*128) at rows 896 and 1024; group 3 at
// row 1152: q [2688, 3584), k and v [384, 512) at rows 2048 and 2176. Two bytes a row.
TEST(QkvBiasLayoutTest, MegatronTp2InterleavesTheBiasPerQueryGroup) {
  const ModelPreset p = Qwen25SevenB();
  const Layout l = Build(p, "megatron:tp=2");
  const std::string bias = "decoder.layers.3.self_attention.linear_qkv.bias";
  ExpectBiasFragments(l, 1, bias,
                      {{"q_proj.bias", 1792, 2688, 0},
                       {"k_proj.bias", 256, 384, 1792},
                       {"v_proj.bias", 256, 384, 2048},
                       {"q_proj.bias", 2688, 3584, 2304},
                       {"k_proj.bias", 384, 512, 4096},
                       {"v_proj.bias", 384, 512, 4352}});
  EXPECT_EQ(BufferBytes(l, 1, bias), 4608);
  ExpectBiasFragments(l, 0, bias,
                      {{"q_proj.bias", 0, 896, 0},
                       {"k_proj.bias", 0, 128, 1792},
                       {"v_proj.bias", 0, 128, 2048},
                       {"q_proj.bias", 896, 1792, 2304},
                       {"k_proj.bias", 128, 256, 4096},
                       {"v_proj.bias", 128, 256, 4352}});
  // o_proj has no bias: linear_proj holds the weight only.
  EXPECT_EQ(p.Find(Layer3("o_proj.bias")), nullptr);
  const ModelPreset small = Qwen25SevenB(1.0 / 64);
  ExpectCoverage(Build(small, "megatron:tp=2"), small, Copies(1, 2, 0));
}

// vLLM TP2: rank 1's qkv_proj.bias is q rows [14*128, 28*128) = [1792, 3584) at byte 0, then KV
// heads 2 and 3: k rows [256, 512) at byte 1792*2 = 3584, v at (1792 + 256)*2 = 4096; 2304 values.
TEST(QkvBiasLayoutTest, VllmTp2FusesTheRanksBiasRows) {
  const ModelPreset p = Qwen25SevenB();
  const Layout l = Build(p, "vllm:tp=2,dp=2");
  const std::string bias = "model.layers.3.self_attn.qkv_proj.bias";
  for (int rank : {1, 3}) {  // DP replica 1 holds the same as replica 0
    ExpectBiasFragments(l, rank, bias,
                        {{"q_proj.bias", 1792, 3584, 0},
                         {"k_proj.bias", 256, 512, 3584},
                         {"v_proj.bias", 256, 512, 4096}});
    EXPECT_EQ(BufferBytes(l, rank, bias), 4608);
  }
  const ModelPreset small = Qwen25SevenB(1.0 / 64);
  ExpectCoverage(Build(small, "vllm:tp=2,dp=2"), small, Copies(2, 2, 0));
}

// vLLM asserts total_num_heads % tp_size == 0 (qwen2.py Qwen2Attention): 28 heads refuse tp=8.
TEST(QkvBiasLayoutTest, VllmRefusesTp8ForTwentyEightHeads) {
  const ModelPreset p = Qwen25SevenB();
  Result<FrameworkSpec> spec = ResolveFrameworkSpec(Spec("vllm:tp=8"), p.config());
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().ToString().find("num_heads"), std::string::npos)
      << spec.status().ToString();
}

// A one-layer Qwen2-like model for KV replication: 8 heads and 2 KV heads of 4 over hidden 32.
// At vLLM tp=8 each rank has 1 query head and 1 KV head, num_kv_head_replicas = 8 / 2 = 4: rank
// 5 holds q rows [20, 24) at byte 0 and KV head 5 // 4 = 1, k and v rows [4, 8) at bytes 8 and
// 16; rank 3 KV head 0.
TEST(QkvBiasLayoutTest, VllmTp8ReplicatesKvBiasesWithTheirHeads) {
  ModelConfig c = OneLayerConfig("qwen2-kv2", ModelFamily::kLlama, 32, 8, 2, 4, 64);
  c.intermediate = 64;
  c.qkv_bias = true;
  const ModelPreset p = PresetOf(c);
  const Layout l = Build(p, "vllm:tp=8");
  const std::string bias = "model.layers.0.self_attn.qkv_proj.bias";
  auto layer0 = [](const std::string& s) { return "model.layers.0.self_attn." + s; };
  auto q5 = FragmentsIn(l, 5, bias, layer0("q_proj.bias"));
  auto k5 = FragmentsIn(l, 5, bias, layer0("k_proj.bias"));
  auto v5 = FragmentsIn(l, 5, bias, layer0("v_proj.bias"));
  auto k3 = FragmentsIn(l, 3, bias, layer0("k_proj.bias"));
  ASSERT_EQ(q5.size(), 1u);
  ASSERT_EQ(k5.size(), 1u);
  ASSERT_EQ(v5.size(), 1u);
  ASSERT_EQ(k3.size(), 1u);
  EXPECT_EQ(q5[0].box.lo[0], 20);
  EXPECT_EQ(q5[0].box.hi[0], 24);
  EXPECT_EQ(q5[0].loc.byte_offset, 0);
  EXPECT_EQ(k5[0].box.lo[0], 4);
  EXPECT_EQ(k5[0].box.hi[0], 8);
  EXPECT_EQ(k5[0].loc.byte_offset, 8);
  EXPECT_EQ(v5[0].box.lo[0], 4);
  EXPECT_EQ(v5[0].loc.byte_offset, 16);
  EXPECT_EQ(k3[0].box.lo[0], 0);
  EXPECT_EQ(k3[0].box.hi[0], 4);
  EXPECT_EQ(BufferBytes(l, 5, bias), 24);
  ExpectCoverage(l, p, [](const std::string& n) {
    if (TpReplicated(n)) return 8;
    return n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos ? 4 : 1;
  });
}

// buffers=distopt of a one-layer Qwen2-like model (hidden 16, 4 heads and 2 KV heads of 4, MLP
// 32, vocabulary 64 padded to 256 over tp 2: 128 rows a rank). Rank 0's parameters in
// named_parameters() order and their elements: embedding 128*16 = 2048, linear_proj 16*8 = 128,
// linear_qkv.layer_norm_weight 16, linear_qkv.weight 16*16 = 256, linear_qkv.bias 16,
// linear_fc1.layer_norm_weight 16, linear_fc1 32*16 = 512, linear_fc2 16*16 = 256,
// final_layernorm 16, output_layer 2048. Reversed, each start padded to 64 elements:
// output_layer 0, final norm 2048, fc2 2112, fc1 2368, fc1 norm 2880, qkv bias 2944, qkv weight
// 3008, qkv norm 3264, linear_proj 3328, embedding 3456; the bucket ends at 5504, a multiple of
// 128. Rank 0's bias is query group 0: q rows [0, 8) at element 2944, k [0, 4) at 2952, v at 2956.
TEST(QkvBiasLayoutTest, DistributedOptimizerBufferHoldsTheBiasAfterTheWeight) {
  ModelConfig c = OneLayerConfig("qwen2-tiny", ModelFamily::kLlama, 16, 4, 2, 4, 64);
  c.intermediate = 32;
  c.qkv_bias = true;
  const ModelPreset p = PresetOf(c);
  const Layout l = BuildAsSpecified(p, "megatron:tp=2,buffers=distopt");
  const std::string buf = "buffers.0.param_data";
  auto start = [&](int rank, const std::string& name) {
    std::vector<Fragment> f = FragmentsIn(l, rank, buf, name);
    return f.empty() ? int64_t{-1} : f[0].loc.byte_offset / 2;
  };
  const std::string a = "model.layers.0.self_attn.";
  EXPECT_EQ(start(0, "model.layers.0.mlp.up_proj.weight"), 2368 + 16 * 16);  // after 16 gate rows
  EXPECT_EQ(start(0, "model.layers.0.post_attention_layernorm.weight"), 2880);
  EXPECT_EQ(start(0, a + "q_proj.bias"), 2944);
  EXPECT_EQ(start(0, a + "k_proj.bias"), 2952);
  EXPECT_EQ(start(0, a + "v_proj.bias"), 2956);
  EXPECT_EQ(start(0, a + "q_proj.weight"), 3008);
  EXPECT_EQ(start(0, "model.layers.0.input_layernorm.weight"), 3264);
  EXPECT_EQ(start(0, a + "o_proj.weight"), 3328);
  EXPECT_EQ(start(0, "model.embed_tokens.weight"), 3456);
  EXPECT_EQ(start(1, a + "k_proj.bias"), 2952);
  EXPECT_EQ(FragmentsIn(l, 1, buf, a + "k_proj.bias")[0].box.lo[0], 4);
  EXPECT_EQ(l.buffers[static_cast<size_t>(l.FindBuffer(0, buf))].bytes, 5504 * 2);
  ExpectCoverage(l, p, Copies(1, 2, 0));
}

TEST(QkvBiasLayoutTest, ExplainNamesTheBiasRule) {
  const ModelPreset p = Qwen25SevenB();
  for (const auto& [spec, rule] :
       {std::pair{"vllm:tp=2", "qkv_proj.bias"}, std::pair{"megatron:tp=2", "linear_qkv.bias"}}) {
    const FrameworkSpec resolved = ResolveFrameworkSpec(Spec(spec), p.config()).value();
    bool named = false;
    for (const LayoutRule& r : RulesForTensor(p.config(), resolved, Layer3("k_proj.bias"))) {
      named = named || r.rule.find(rule) != std::string::npos;
    }
    EXPECT_TRUE(named) << spec;
  }
}

}  // namespace
}  // namespace ferry::models
