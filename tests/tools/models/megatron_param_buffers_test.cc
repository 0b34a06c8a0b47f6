// Tests for tools/models/megatron_param_buffers: the Megatron layout with buffers=distopt, its
// parameters at the offsets worked by hand from megatron/core/distributed/
// distributed_data_parallel.py (named_parameters() order, reversed in the buffer), the module
// registration order of megatron/core/models/gpt/gpt_model.py, transformer_layer.py,
// attention.py and Transformer Engine's layernorm_linear.py (for hybrid models
// megatron/core/models/hybrid/hybrid_model.py, hybrid_block.py, megatron/core/ssm/mamba_layer.py
// and mamba_mixer.py), and megatron/core/optimizer/param_layout.py's padding.
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
  EXPECT_EQ(MegatronParamOrder("decoder.layers.3.mixer.in_proj.bias").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MegatronParamBuffersTest, MtpParamOrder) {
  // megatron/core/models/gpt/gpt_model.py registers the decoder, then the MTP block, then the
  // output layer; megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer
  // enorm, hnorm, eh_proj, mtp_model_layer, final_layernorm.
  auto key = [](const std::string& n) { return MegatronParamOrder(n).value(); };
  const std::vector<std::string> order = {
      "decoder.layers.9.mlp.linear_fc2.weight",
      "decoder.final_layernorm.weight",
      "mtp.layers.0.enorm.weight",
      "mtp.layers.0.hnorm.weight",
      "mtp.layers.0.eh_proj.weight",
      "mtp.layers.0.mtp_model_layer.input_layernorm.weight",
      "mtp.layers.0.mtp_model_layer.self_attention.linear_proj.weight",
      "mtp.layers.0.mtp_model_layer.mlp.router.weight",
      "mtp.layers.0.mtp_model_layer.mlp.experts.linear_fc1.weight3",
      "mtp.layers.0.mtp_model_layer.mlp.shared_experts.linear_fc2.weight",
      "mtp.layers.0.final_layernorm.weight",
      "mtp.layers.1.enorm.weight",
      "output_layer.weight"};
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_TRUE(key(order[i - 1]) < key(order[i])) << order[i - 1] << " before " << order[i];
  }
  // The inner layer's routed experts go with the expert-parallel buffers, as a decoder layer's.
  EXPECT_TRUE(key("mtp.layers.0.mtp_model_layer.mlp.experts.linear_fc1.weight3").expert);
  EXPECT_TRUE(key("decoder.layers.3.mlp.experts.local_experts.1.linear_fc2.weight").expert);
  EXPECT_FALSE(key("mtp.layers.0.mtp_model_layer.mlp.shared_experts.linear_fc1.weight").expert);
  EXPECT_EQ(MegatronParamOrder("mtp.layers.0.mtp_model_layer.mlp.router.expert_bias").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(MegatronParamOrder("mtp.layers.0.shared_head.weight").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MegatronParamBuffersTest, ExpertParallelMtpExpertsInTheExpertBuffers) {
  // ep 2: the MTP layer's experts join its stage's expert_parallel_buffers, its dense parameters
  // the stage's buffers.
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 256);
  Layout l = BuildAsSpecified(ds, "megatron:pp=2,first=31,ep=2,mtp=1,buffers=distopt");
  const int t = l.FindTensor("model.layers.61.mlp.experts.[0:256].down_proj.weight");
  const int eh = l.FindTensor("model.layers.61.eh_proj.weight");
  ASSERT_GE(t, 0);
  ASSERT_GE(eh, 0);
  int experts = 0, projections = 0;
  for (const Fragment& f : l.fragments) {
    const std::string& buffer = l.buffers[f.loc.buffer].name;
    if (f.tensor == t) {
      EXPECT_EQ(buffer, "expert_parallel_buffers.0.param_data");
      ++experts;
    } else if (f.tensor == eh) {
      EXPECT_EQ(buffer, "buffers.0.param_data");
      ++projections;
    }
  }
  EXPECT_GT(experts, 0);
  EXPECT_GT(projections, 0);
}

TEST(MegatronParamBuffersTest, MambaParamOrder) {
  // MambaMixer's own parameters (conv1d_weight, conv1d_bias, dt_bias, A_log, D, in the order
  // __init__ creates them) come before its child modules' (in_proj, norm, out_proj); the hybrid
  // stack's final norm is final_norm.
  auto key = [](const std::string& n) { return MegatronParamOrder(n).value(); };
  const std::vector<std::string> order = {
      "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D", "in_proj.layer_norm_weight",
      "in_proj.weight", "norm.weight", "out_proj.weight"};
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_TRUE(key("decoder.layers.0.mixer." + order[i - 1]) <
                key("decoder.layers.0.mixer." + order[i]))
        << order[i - 1] << " before " << order[i];
  }
  EXPECT_TRUE(key("decoder.layers.0.mixer.out_proj.weight") <
              key("decoder.layers.1.self_attention.linear_proj.weight"));
  EXPECT_TRUE(key("decoder.layers.2.mlp.linear_fc2.weight") < key("decoder.final_norm.weight"));
  EXPECT_TRUE(key("decoder.final_norm.weight") < key("output_layer.weight"));
}

// The byte offset of the first fragment of `hf_name` in `buffer` on `rank`, or -1.
int64_t StartOf(const Layout& l, int rank, const std::string& buffer, const std::string& hf_name) {
  std::vector<Fragment> f = FragmentsIn(l, rank, buffer, hf_name);
  return f.empty() ? -1 : f[0].loc.byte_offset;
}

// A three-layer hybrid model "M*-" small enough to work by hand: hidden 16, vocabulary 64
// (padded to 256 for tp=2: 128 rows a rank), attention 4 heads / 2 KV heads of 4, MLP 32, Mamba
// 4 heads of 4, 2 groups of state 4, conv kernel 4.
ModelPreset ThreeLayerHybrid() {
  ModelConfig c = OneLayerConfig("hybrid-3", ModelFamily::kNemotronH, 16, 4, 2, 4, 64);
  c.num_layers = 3;
  c.hybrid_pattern = "M*-";
  c.intermediate = 32;
  c.mamba_num_heads = 4;
  c.mamba_head_dim = 4;
  c.mamba_groups = 2;
  c.ssm_state_size = 4;
  c.conv_kernel = 4;
  return PresetOf(c);
}

TEST(MegatronParamBuffersTest, HybridModelWorkedByHand) {
  // tp=2, rank 0, elements per parameter in named_parameters() order: embedding 128*16 = 2048;
  // layer 0 (M): conv1d.weight 16*1*4 = 64, conv1d.bias 16, dt_bias 2, A_log 2, D 2,
  // in_proj.layer_norm_weight 16, in_proj.weight (52/2 = 26)*16 = 416, norm 8, out_proj 16*8 = 128;
  // layer 1 (*): linear_proj 16*8 = 128, linear_qkv.layer_norm_weight 16, linear_qkv (32/2)*16 =
  // 256; layer 2 (-): linear_fc1.layer_norm_weight 16, linear_fc1 16*16 = 256, linear_fc2 256;
  // final_norm 16; output_layer 2048. Reversed, each start padded to 64 elements:
  //   output_layer 0, final_norm 2048, fc2 2112, fc1 2368, fc1 norm 2624, qkv 2688, qkv norm 2944,
  //   linear_proj 3008, out_proj 3136, mixer norm 3264, in_proj 3328, in_proj norm 3776, D 3840,
  //   A_log 3904, dt_bias 3968, conv1d.bias 4032, conv1d.weight 4096, embedding 4160;
  // the bucket ends at 4160 + 2048 = 6208, padded to lcm(dp 1, 128): 6272 elements.
  ModelPreset p = ThreeLayerHybrid();
  Layout l = BuildAsSpecified(p, "megatron:tp=2,buffers=distopt");
  const std::string buf = "buffers.0.param_data";
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"lm_head.weight", 0},
      {"backbone.norm_f.weight", 2048},
      {"backbone.layers.2.mixer.down_proj.weight", 2112},
      {"backbone.layers.2.mixer.up_proj.weight", 2368},
      {"backbone.layers.2.norm.weight", 2624},
      {"backbone.layers.1.mixer.q_proj.weight", 2688},
      {"backbone.layers.1.norm.weight", 2944},
      {"backbone.layers.1.mixer.o_proj.weight", 3008},
      {"backbone.layers.0.mixer.out_proj.weight", 3136},
      {"backbone.layers.0.mixer.norm.weight", 3264},
      {"backbone.layers.0.mixer.in_proj.weight", 3328},
      {"backbone.layers.0.norm.weight", 3776},
      {"backbone.layers.0.mixer.D", 3840},
      {"backbone.layers.0.mixer.A_log", 3904},
      {"backbone.layers.0.mixer.dt_bias", 3968},
      {"backbone.layers.0.mixer.conv1d.bias", 4032},
      {"backbone.layers.0.mixer.conv1d.weight", 4096},
      {"backbone.embeddings.weight", 4160},
  };
  // Rank 1's vocabulary rows (128-255) are all padding: its output layer and embedding hold no
  // fragment, though their space is there.
  for (const auto& [name, element] : expected) {
    EXPECT_EQ(StartOf(l, 0, buf, name), element * 2) << name;
    if (name.find("layers") != std::string::npos) {
      EXPECT_EQ(StartOf(l, 1, buf, name), element * 2) << name;
    }
  }
  const int b0 = l.FindBuffer(0, buf);
  ASSERT_GE(b0, 0);
  EXPECT_EQ(l.buffers[static_cast<size_t>(b0)].bytes, 6272 * 2);
  EXPECT_EQ(l.buffers.size(), 2u);  // one param_data buffer a rank
  ExpectCoverage(l, p, Copies(1, 2, 0));
}

// Megatron-Core 0.18 (megatron/core/ssm/mamba_mixer.py at git tag core_v0.18.2): MambaMixer's
// __init__ assigns in_proj, conv1d (a child nn.Conv1d: weight, bias), then its own dt_bias, A_log,
// D, then norm and out_proj; named_parameters() visits the mixer's own parameters before its
// children: dt_bias, A_log, D, in_proj (layer_norm_weight, weight), conv1d (weight, bias), norm,
// out_proj.
TEST(MegatronParamBuffersTest, MambaParamOrderBeforeMcore019) {
  auto key = [](const std::string& n) { return MegatronParamOrder(n, /*mamba_conv1d_module=*/true).value(); };
  const std::vector<std::string> order = {
      "dt_bias", "A_log", "D", "in_proj.layer_norm_weight", "in_proj.weight", "conv1d.weight", "conv1d.bias",
      "norm.weight", "out_proj.weight"};
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_TRUE(key("decoder.layers.0.mixer." + order[i - 1]) < key("decoder.layers.0.mixer." + order[i]))
        << order[i - 1] << " before " << order[i];
  }
  EXPECT_TRUE(key("decoder.layers.0.mixer.out_proj.weight") <
              key("decoder.layers.1.self_attention.linear_proj.weight"));
}

TEST(MegatronParamBuffersTest, HybridModelWorkedByHandForMcore018) {
  // As HybridModelWorkedByHand, layer 0's mixer in the 0.18 order: dt_bias 2, A_log 2, D 2,
  // in_proj.layer_norm_weight 16, in_proj.weight 416, conv1d.weight 64, conv1d.bias 16, norm 8,
  // out_proj 128. Reversed, each start padded to 64 elements: ... out_proj 3136, mixer norm 3264,
  // conv1d.bias 3328, conv1d.weight 3392, in_proj 3456 (416 elements: next start 3904), in_proj
  // norm 3904, D 3968, A_log 4032, dt_bias 4096, embedding 4160; the same 6272 elements in all.
  ModelPreset p = ThreeLayerHybrid();
  Layout l = BuildAsSpecified(p, "megatron:tp=2,buffers=distopt,mcore=0.18");
  const std::string buf = "buffers.0.param_data";
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"backbone.layers.1.mixer.o_proj.weight", 3008},
      {"backbone.layers.0.mixer.out_proj.weight", 3136},
      {"backbone.layers.0.mixer.norm.weight", 3264},
      {"backbone.layers.0.mixer.conv1d.bias", 3328},
      {"backbone.layers.0.mixer.conv1d.weight", 3392},
      {"backbone.layers.0.mixer.in_proj.weight", 3456},
      {"backbone.layers.0.norm.weight", 3904},
      {"backbone.layers.0.mixer.D", 3968},
      {"backbone.layers.0.mixer.A_log", 4032},
      {"backbone.layers.0.mixer.dt_bias", 4096},
      {"backbone.embeddings.weight", 4160},
  };
  for (const auto& [name, element] : expected) {
    EXPECT_EQ(StartOf(l, 0, buf, name), element * 2) << name;
  }
  const int b0 = l.FindBuffer(0, buf);
  ASSERT_GE(b0, 0);
  EXPECT_EQ(l.buffers[static_cast<size_t>(b0)].bytes, 6272 * 2);
  ExpectCoverage(l, p, Copies(1, 2, 0));
}

TEST(MegatronParamBuffersTest, McoreReleaseIsParsedPrintedAndBoundedByWhatWasRead) {
  for (const char* text : {"megatron:tp=2,mcore=0.18", "megatron:tp=2,mcore=0.18.2"}) {
    Result<FrameworkSpec> s = ParseFrameworkSpec(text);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->megatron.mcore_minor, 18);
    EXPECT_NE(s->ToString().find(",mcore=0.18"), std::string::npos) << s->ToString();
  }
  Result<FrameworkSpec> later = ParseFrameworkSpec("megatron:tp=2,mcore=0.21");
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->megatron.mcore_minor, 19);
  EXPECT_EQ(later->ToString().find("mcore"), std::string::npos);
  Result<FrameworkSpec> old = ParseFrameworkSpec("megatron:tp=2,mcore=0.17");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("releases before 0.18 are not modelled"), std::string::npos)
      << old.status().ToString();
  for (const char* bad : {"megatron:mcore=1.2", "megatron:mcore=0.", "megatron:mcore=0.18.2.1", "megatron:mcore=v0.18"}) {
    Result<FrameworkSpec> b = ParseFrameworkSpec(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("for mcore: expected a Megatron-Core release"), std::string::npos)
        << b.status().ToString();
  }
}

TEST(MegatronParamBuffersTest, HybridModelOverPipeStages) {
  // pattern=M*|- on pp=2: stage 1 (ranks 2, 3) builds the '-' layer as decoder.layers.0, then the
  // final norm and the output layer. Reversed: output_layer 0, final_norm 2048, fc2 2112, fc1
  // 2368, fc1 norm 2624, ending at 2640, padded to 128: 2688 elements.
  ModelPreset p = ThreeLayerHybrid();
  Layout plain = BuildAsSpecified(p, "megatron:tp=2,pp=2,pattern=M*|-");
  EXPECT_GE(plain.FindBuffer(2, "decoder.layers.0.mlp.linear_fc2.weight"), 0);
  EXPECT_GE(plain.FindBuffer(0, "decoder.layers.1.self_attention.linear_proj.weight"), 0);
  Layout l = BuildAsSpecified(p, "megatron:tp=2,pp=2,buffers=distopt,pattern=M*|-");
  const std::string buf = "buffers.0.param_data";
  EXPECT_EQ(StartOf(l, 2, buf, "backbone.layers.2.mixer.down_proj.weight"), 2112 * 2);
  EXPECT_EQ(StartOf(l, 3, buf, "backbone.layers.2.norm.weight"), 2624 * 2);
  const int b2 = l.FindBuffer(2, buf);
  ASSERT_GE(b2, 0);
  EXPECT_EQ(l.buffers[static_cast<size_t>(b2)].bytes, 2688 * 2);
  // Stage 0 (layers 0 and 1, the embedding) starts with layer 1's linear_qkv at 0, its norm at 256,
  // linear_proj at pad64(272) = 320, then layer 0 from its out_proj at pad64(448) = 448.
  EXPECT_EQ(StartOf(l, 0, buf, "backbone.layers.1.mixer.q_proj.weight"), 0);
  EXPECT_EQ(StartOf(l, 1, buf, "backbone.layers.1.norm.weight"), 256 * 2);
  EXPECT_EQ(StartOf(l, 0, buf, "backbone.layers.1.mixer.o_proj.weight"), 320 * 2);
  EXPECT_EQ(StartOf(l, 1, buf, "backbone.layers.0.mixer.out_proj.weight"), 448 * 2);
  ExpectCoverage(l, p, Copies(1, 2, 0));
}

TEST(MegatronParamBuffersTest, NemotronHUnderTheDistributedOptimizer) {
  // The full-size preset (with --overlap-grad-reduce: 40M-element buckets on pipeline rank 0),
  // validated (bounds, no overlap, full coverage) by BuildAsSpecified.
  ModelPreset p = Preset("nemotron-h-8b", 1.0);
  for (const std::string spec :
       {"megatron:tp=2,buffers=distopt", "megatron:tp=2,pp=2,buffers=distopt",
        "megatron:tp=2,pp=2,buffers=distopt,overlap_grad_reduce=yes"}) {
    Layout l = BuildAsSpecified(p, spec);
    EXPECT_GE(l.FindBuffer(0, "buffers.0.param_data"), 0) << spec;
    EXPECT_EQ(l.FindBuffer(0, "embedding.word_embeddings.weight"), -1) << spec;
  }
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
  // GroupedMLP (megatron/core/transformer/moe/experts.py) is in core_v0.16.1, not in core_v0.17.0.
  Result<Layout> legacy = BuildFrameworkLayout(Preset("qwen3-30b-a3b", 1.0 / 64),
                                               Spec("megatron:experts=legacy_grouped,buffers=distopt"));
  ASSERT_FALSE(legacy.ok());
  EXPECT_NE(legacy.status().message().find("GroupedMLP exists up to 0.16 only"), std::string::npos)
      << legacy.status().ToString();
  EXPECT_FALSE(BuildFrameworkLayout(p, Spec("megatron:overlap_grad_reduce=yes")).ok());
  EXPECT_EQ(Spec("megatron:buffers=distopt,overlap_grad_reduce=yes").ToString(),
            "megatron:tp=1,pp=1,ep=1,cp=1,buffers=distopt,overlap_grad_reduce=yes");
}

}  // namespace
}  // namespace ferry::models
