// Tests for tools/models/presets: parameter counts against published figures, tensor names and
// shapes from the public configs, and scaling.
#include "tools/models/presets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

namespace ferry::models {
namespace {

ModelPreset Make(const std::string& name, double scale = 1.0) {
  Result<ModelPreset> preset = MakePreset(name, scale);
  EXPECT_TRUE(preset.ok()) << preset.status().ToString();
  return std::move(preset).value();
}

TEST(PresetsTest, ParameterCountsMatchPublishedFigures) {
  // {name, published figure, relative tolerance}. Kimi-K2's model card says "1T" (one significant
  // digit); Hugging Face's checkpoint metadata for moonshotai/Kimi-K2-Instruct lists 1.03T, and the
  // config (61 layers, 384 experts of 3 x 2048 x 7168) gives 1.026T.
  const std::tuple<const char*, double, double> kPublished[] = {
      {"llama-3.1-8b", 8.03e9, 0.01},   {"llama-3.1-70b", 70.6e9, 0.01},
      {"qwen3-30b-a3b", 30.5e9, 0.01},  {"qwen3-235b-a22b", 235e9, 0.01},
      {"deepseek-v3", 671e9, 0.01},     {"kimi-k2", 1.03e12, 0.01},
      {"nemotron-h-8b", 8.1e9, 0.01},
  };
  for (const auto& [name, published, tolerance] : kPublished) {
    ModelPreset p = Make(name);
    double params = static_cast<double>(p.NumParams());
    EXPECT_NEAR(params / published, 1.0, tolerance) << name << " has " << params << " parameters";
    EXPECT_EQ(p.config().published_params, published) << name;
  }
  EXPECT_EQ(PresetNames().size(), std::size(kPublished));
}

TEST(PresetsTest, Llama8bTensorsFollowHuggingFaceNames) {
  ModelPreset p = Make("llama-3.1-8b");
  // embed + 9 per layer + norm + lm_head.
  EXPECT_EQ(p.tensors().size(), 1u + 32u * 9u + 2u);
  const TensorSpec* k = p.Find("model.layers.3.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(k->dtype, DType::kBF16);
  const TensorSpec* down = p.Find("model.layers.31.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(p.Find("model.layers.32.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(p.Find("lm_head.weight"), nullptr);
}

TEST(PresetsTest, Qwen3MoeHasExpertsAndQkNorm) {
  ModelPreset p = Make("qwen3-235b-a22b");
  const TensorSpec* e = p.Find("model.layers.93.mlp.experts.127.gate_proj.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{1536, 4096}));
  EXPECT_EQ(p.Find("model.layers.0.mlp.experts.128.gate_proj.weight"), nullptr);
  ASSERT_NE(p.Find("model.layers.0.self_attn.q_norm.weight"), nullptr);
  EXPECT_EQ(p.Find("model.layers.0.self_attn.q_norm.weight")->shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(p.Find("model.layers.0.mlp.gate.weight")->shape, (std::vector<int64_t>{128, 4096}));
  EXPECT_EQ(p.Find("model.layers.0.mlp.gate_proj.weight"), nullptr);
}

TEST(PresetsTest, DeepseekV3HasMlaDenseThenMoeAndNoMtp) {
  ModelPreset p = Make("deepseek-v3");
  EXPECT_EQ(p.Find("model.layers.2.mlp.gate_proj.weight")->shape,
            (std::vector<int64_t>{18432, 7168}));
  EXPECT_EQ(p.Find("model.layers.2.mlp.experts.0.gate_proj.weight"), nullptr);
  EXPECT_EQ(p.Find("model.layers.3.mlp.experts.255.down_proj.weight")->shape,
            (std::vector<int64_t>{7168, 2048}));
  EXPECT_EQ(p.Find("model.layers.3.mlp.shared_experts.up_proj.weight")->shape,
            (std::vector<int64_t>{2048, 7168}));
  EXPECT_EQ(p.Find("model.layers.3.mlp.gate.e_score_correction_bias")->dtype, DType::kFP32);
  EXPECT_EQ(p.Find("model.layers.0.self_attn.q_b_proj.weight")->shape,
            (std::vector<int64_t>{128 * 192, 1536}));
  EXPECT_EQ(p.Find("model.layers.0.self_attn.kv_a_proj_with_mqa.weight")->shape,
            (std::vector<int64_t>{576, 7168}));
  EXPECT_EQ(p.Find("model.layers.0.self_attn.kv_b_proj.weight")->shape,
            (std::vector<int64_t>{128 * 256, 512}));
  EXPECT_EQ(p.Find("model.layers.60.self_attn.o_proj.weight")->shape,
            (std::vector<int64_t>{7168, 128 * 128}));
  EXPECT_EQ(p.Find("model.layers.61.self_attn.o_proj.weight"), nullptr);  // MTP only when asked for
}

TEST(PresetsTest, KimiK2HasOneDenseLayerAnd384Experts) {
  ModelPreset p = Make("kimi-k2");
  EXPECT_NE(p.Find("model.layers.0.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(p.Find("model.layers.1.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(p.Find("model.layers.1.mlp.experts.383.up_proj.weight"), nullptr);
  EXPECT_EQ(p.Find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{163840, 7168}));
}

TEST(PresetsTest, NemotronHLayersFollowThePattern) {
  ModelPreset p = Make("nemotron-h-8b");
  const ModelConfig& c = p.config();
  int mamba = 0, attention = 0, mlp = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    switch (c.KindOfLayer(l)) {
      case LayerKind::kMamba: ++mamba; break;
      case LayerKind::kAttention: ++attention; break;
      case LayerKind::kMlp: ++mlp; break;
      case LayerKind::kDecoder: ADD_FAILURE() << "decoder layer in a hybrid model"; break;
    }
  }
  EXPECT_EQ(mamba, 24);
  EXPECT_EQ(attention, 4);
  EXPECT_EQ(mlp, 24);
  // Layer 0 is Mamba-2: in_proj rows = z + x + B + C + dt = 8192*2 + 2*8*128 + 128.
  EXPECT_EQ(p.Find("backbone.layers.0.mixer.in_proj.weight")->shape,
            (std::vector<int64_t>{18560, 4096}));
  EXPECT_EQ(p.Find("backbone.layers.0.mixer.conv1d.weight")->shape,
            (std::vector<int64_t>{10240, 1, 4}));
  EXPECT_EQ(p.Find("backbone.layers.1.mixer.up_proj.weight")->shape,
            (std::vector<int64_t>{21504, 4096}));
  EXPECT_NE(p.Find("backbone.layers.7.mixer.k_proj.weight"), nullptr);  // pattern[7] == '*'
}

TEST(PresetsTest, ScaleShrinksDimsAndKeepsStructure) {
  ModelPreset full = Make("qwen3-30b-a3b");
  ModelPreset small = Make("qwen3-30b-a3b", 1.0 / 64);
  EXPECT_EQ(small.config().name, "qwen3-30b-a3b@1/64");
  EXPECT_EQ(small.tensors().size(), full.tensors().size());
  EXPECT_EQ(small.config().hidden, 32);
  EXPECT_EQ(small.config().num_experts, 128);
  EXPECT_EQ(small.config().num_heads, 32);
  EXPECT_EQ(small.config().num_kv_heads, 4);
  EXPECT_EQ(small.config().head_dim, 2);
  EXPECT_EQ(small.config().moe_intermediate, 16);
  EXPECT_EQ(small.config().vocab % 16, 0);
  EXPECT_LT(small.NumParams() * 1000, full.NumParams());
  for (size_t i = 0; i < full.tensors().size(); ++i) {
    ASSERT_EQ(small.tensors()[i].name, full.tensors()[i].name);
    ASSERT_EQ(small.tensors()[i].shape.size(), full.tensors()[i].shape.size());
  }
  ModelPreset mla = Make("deepseek-v3", 1.0 / 64);
  EXPECT_EQ(mla.config().head_dim, mla.config().qk_nope_head_dim + mla.config().qk_rope_head_dim);
}

TEST(PresetsTest, ParseScaleAndErrors) {
  EXPECT_DOUBLE_EQ(ParseScale("1/64").value(), 1.0 / 64);
  EXPECT_DOUBLE_EQ(ParseScale("0.25").value(), 0.25);
  EXPECT_DOUBLE_EQ(ParseScale("1").value(), 1.0);
  EXPECT_FALSE(ParseScale("2").ok());
  EXPECT_FALSE(ParseScale("1/0").ok());
  EXPECT_FALSE(ParseScale("abc").ok());
  Result<ModelPreset> unknown = MakePreset("gpt-5");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("llama-3.1-8b"), std::string::npos);
  ModelConfig bad = PresetConfig("nemotron-h-8b").value();
  bad.hybrid_pattern.pop_back();
  EXPECT_FALSE(ModelPreset::FromConfig(bad).ok());
  // vllm/model_executor/models/nemotron_h_mtp.py: a hybrid model's MTP layers are a pattern of
  // attention and MoE layers of their own, which ferry does not model
  ModelConfig mtp = PresetConfig("nemotron-h-8b").value();
  mtp.nextn_layers = 1;
  Result<ModelPreset> hybrid_mtp = ModelPreset::FromConfig(mtp);
  ASSERT_FALSE(hybrid_mtp.ok());
  EXPECT_NE(hybrid_mtp.status().message().find("NemotronHMTP"), std::string::npos)
      << hybrid_mtp.status().ToString();
  // q/k/v biases are Qwen2's, a dense model; no other family's layouts place them
  ModelConfig moe_bias = PresetConfig("qwen3-30b-a3b").value();
  moe_bias.qkv_bias = true;
  Result<ModelPreset> refused = ModelPreset::FromConfig(moe_bias);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("dense family only"), std::string::npos);
}

// Scaling keeps the biases the size of their projections' rows.
TEST(PresetsTest, ScaledQkvBiasesFollowTheirHeads) {
  ModelConfig c = PresetConfig("llama-3.1-8b").value();
  c.qkv_bias = true;
  ModelConfig small = ScaleConfig(c, 1.0 / 64).value();
  ModelPreset p = ModelPreset::FromConfig(small).value();
  EXPECT_EQ(p.Find("model.layers.31.self_attn.q_proj.bias")->shape,
            (std::vector<int64_t>{32 * 2}));  // 32 heads of 128 / 64
  EXPECT_EQ(p.Find("model.layers.31.self_attn.v_proj.bias")->shape,
            (std::vector<int64_t>{8 * 2}));
}

}  // namespace
}  // namespace ferry::models
