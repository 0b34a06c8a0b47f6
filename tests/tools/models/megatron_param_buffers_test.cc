// Tests for tools/models/megatron_param_buffers: the Megatron layout with buffers=distopt, its
// parameters at the offsets worked by hand from megatron/core/distributed/
// distributed_data_parallel.py (named_parameters() order, reversed in the buffer), the module
// registration order of megatron/core/models/gpt/gpt_model.py, transformer_layer.py,
// attention.py and Transformer Engine's layernorm_linear.py, and megatron/core/optimizer/
// param_layout.py's padding.
#include "tools/models/megatron_param_buffers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

int64_t Pad(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// The byte offset of `hf_name`'s only fragment in `buffer` on `rank`, or -1.
int64_t OffsetOf(const Layout& l, int rank, const std::string& buffer, const std::string& hf_name) {
  std::vector<Fragment> f = FragmentsIn(l, rank, buffer, hf_name);
  return f.size() == 1 ? f[0].loc.byte_offset : -1;
}

TEST(MegatronParamBuffersTest, ParamOrder) {
  // Within a layer: linear_proj (Attention) before linear_qkv (SelfAttention), TE's
  // layer_norm_weight before weight, then the MLP; SequentialMLP experts fc1, fc2 each.
  auto key = [](const std::string& n) { return MegatronParamOrder(n).value(); };
  EXPECT_TRUE(key("decoder.layers.0.self_attention.linear_proj.weight") <
              key("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"));
  EXPECT_TRUE(key("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight") <
              key("decoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(key("decoder.layers.0.mlp.linear_fc2.weight") <
              key("decoder.layers.1.self_attention.linear_proj.weight"));
  EXPECT_TRUE(key("embedding.word_embeddings.weight") <
              key("decoder.layers.0.mlp.linear_fc1.weight"));
  EXPECT_TRUE(key("decoder.final_layernorm.weight") < key("output_layer.weight"));
  EXPECT_TRUE(key("decoder.layers.3.mlp.experts.local_experts.0.linear_fc2.weight") <
              key("decoder.layers.3.mlp.experts.local_experts.1.linear_fc1.weight"));
  EXPECT_TRUE(key("decoder.layers.3.mlp.experts.linear_fc1.weight7") <
              key("decoder.layers.3.mlp.experts.linear_fc2.weight0"));
  EXPECT_TRUE(key("decoder.layers.3.mlp.router.weight") <
              key("decoder.layers.3.mlp.experts.linear_fc1.weight0"));
  EXPECT_EQ(MegatronParamOrder("decoder.layers.3.mlp.router.expert_bias").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(MegatronParamOrder("decoder.layers.3.mixer.in_proj.weight").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MegatronParamBuffersTest, DenseModelInOneBufferPerChunk) {
  // llama-3.1-8b at 1/64 over pp 2, dp 2: stage 1 (ranks 2, 3) holds layers 16-31 as local 0-15,
  // the final norm and the output layer. Reversed: output_layer at 0, final_layernorm at
  // pad64(V * H), layer 31's linear_fc2 at pad64(V * H + H).
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  const int64_t h = p.config().hidden;
  Layout l = BuildAsSpecified(p, "megatron:pp=2,dp=2,buffers=distopt");
  Layout plain = BuildAsSpecified(p, "megatron:pp=2,dp=2");
  const int out = plain.FindBuffer(2, "output_layer.weight");
  ASSERT_GE(out, 0);
  const int64_t v_h = plain.buffers[static_cast<size_t>(out)].bytes / 2;
  const std::string buf = "buffers.0.param_data";
  for (int rank : {2, 3}) {
    EXPECT_EQ(OffsetOf(l, rank, buf, "lm_head.weight"), 0);
    EXPECT_EQ(OffsetOf(l, rank, buf, "model.norm.weight"), Pad(v_h, 64) * 2);
    EXPECT_EQ(OffsetOf(l, rank, buf, "model.layers.31.mlp.down_proj.weight"),
              Pad(Pad(v_h, 64) + h, 64) * 2);
  }
  // Rank 0's buffer ends with the embedding (first in named_parameters()), padded to
  // lcm(dp 2, 128) elements.
  const int b0 = l.FindBuffer(0, buf);
  ASSERT_GE(b0, 0);
  const int64_t bytes = l.buffers[static_cast<size_t>(b0)].bytes;
  EXPECT_EQ(bytes % (128 * 2), 0);
  const int64_t embedding = OffsetOf(l, 0, buf, "model.embed_tokens.weight");
  EXPECT_EQ(Pad(embedding / 2 + v_h, 128) * 2, bytes);
  EXPECT_EQ(l.FindBuffer(0, "embedding.word_embeddings.weight"), -1);
  ExpectCoverage(l, p, Copies(2, 1, 0));
}

TEST(MegatronParamBuffersTest, ExpertsInTheirOwnBuffer) {
  // qwen3-30b-a3b at 1/64, ep 2 (so allreduce=False: expert_parallel_buffers), TEGroupedMLP:
  // rank 0 holds experts 0-63 as weight0-63; reversed, layer 47's linear_fc2.weight63 (expert 63's
  // down_proj) is first and weight62 follows at pad64(H * I). The router stays in the dense buffer.
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  const int64_t down = p.config().hidden * p.config().moe_intermediate;
  Layout l = Build(p, "megatron:ep=2,experts=grouped,buffers=distopt");
  const std::string experts = "expert_parallel_buffers.0.param_data";
  EXPECT_EQ(OffsetOf(l, 0, experts, "model.layers.47.mlp.experts.63.down_proj.weight"), 0);
  EXPECT_EQ(OffsetOf(l, 0, experts, "model.layers.47.mlp.experts.62.down_proj.weight"),
            Pad(down, 64) * 2);
  EXPECT_EQ(OffsetOf(l, 1, experts, "model.layers.47.mlp.experts.127.down_proj.weight"), 0);
  EXPECT_GE(OffsetOf(l, 0, "buffers.0.param_data", "model.layers.47.mlp.gate.weight"), 0);
  // ep 1 with etp = tp: the experts share the dense buffer.
  Layout shared = Build(p, "megatron:experts=grouped,buffers=distopt");
  EXPECT_EQ(shared.FindBuffer(0, experts), -1);
  EXPECT_GE(OffsetOf(shared, 0, "buffers.0.param_data",
                     "model.layers.47.mlp.experts.127.down_proj.weight"), 0);
}

TEST(MegatronParamBuffersTest, ChunksAndRefusals) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = BuildAsSpecified(p, "megatron:pp=4,vstages=2,buffers=distopt");
  EXPECT_GE(l.FindBuffer(0, "model0.buffers.0.param_data"), 0);
  EXPECT_GE(l.FindBuffer(0, "model1.buffers.0.param_data"), 0);
  EXPECT_FALSE(BuildFrameworkLayout(Preset("nemotron-h-8b", 1.0 / 64),
                                    Spec("megatron:buffers=distopt")).ok());
  EXPECT_FALSE(BuildFrameworkLayout(p, Spec("megatron:overlap_grad_reduce=yes")).ok());
  EXPECT_EQ(Spec("megatron:buffers=distopt,overlap_grad_reduce=yes").ToString(),
            "megatron:tp=1,pp=1,ep=1,cp=1,buffers=distopt,overlap_grad_reduce=yes");
}

}  // namespace
}  // namespace ferry::models
