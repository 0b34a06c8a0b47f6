// Tests of models from Hugging Face config.json files (tools/models/hf_config.h). The files under
// testdata/hf/ are the published config.json of each model on the Hugging Face hub (fields as
// published; the auto_map and generation fields left out). Five are models ferry has presets for,
// whose tensor lists must come out identical to the presets'; Llama-3.2-1B and Qwen3-8B have no
// preset, and their parameter counts are worked by hand below from transformers' modeling files
// (models/llama/modeling_llama.py, models/qwen3/modeling_qwen3.py) and match the published
// 1.24B and 8.2B. Then every refusal names its field.
#include "tools/models/hf_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace ferry::models {
namespace {

const std::string kHf = "tests/tools/models/testdata/hf/";

ModelPreset FromFile(const std::string& model) {
  Result<ModelPreset> preset = MakeModel(kHf + model + "/config.json");
  EXPECT_TRUE(preset.ok()) << preset.status().ToString();
  return preset.ok() ? *preset : *MakePreset("llama-3.1-8b");
}

void ExpectSameTensors(const ModelPreset& a, const ModelPreset& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
    EXPECT_EQ(a.tensors()[i].shape, b.tensors()[i].shape) << a.tensors()[i].name;
    EXPECT_EQ(a.tensors()[i].dtype, b.tensors()[i].dtype) << a.tensors()[i].name;
  }
}

TEST(HfConfig, PublishedConfigsOfPresetModelsGiveThePresetsTensors) {
  for (const auto& [dir, preset] :
       {std::pair{"Llama-3.1-8B", "llama-3.1-8b"}, std::pair{"Qwen3-30B-A3B", "qwen3-30b-a3b"},
        std::pair{"DeepSeek-V3", "deepseek-v3"}, std::pair{"Kimi-K2-Instruct", "kimi-k2"},
        std::pair{"Nemotron-H-8B-Base-8K", "nemotron-h-8b"}}) {
    SCOPED_TRACE(dir);
    const ModelPreset from_file = FromFile(dir);
    EXPECT_EQ(from_file.config().name, dir);
    const ModelPreset built_in = *MakePreset(preset);
    ExpectSameTensors(from_file, built_in);
    EXPECT_EQ(from_file.config().expert_groups, built_in.config().expert_groups);
    EXPECT_EQ(from_file.config().nextn_layers, built_in.config().nextn_layers);
  }
}

// Llama-3.2-1B, embeddings tied (no lm_head): embed 128256 x 2048 = 262,668,288; a layer: q and o
// 2048 x 2048 (32 heads of 64), k and v 512 x 2048 (8 KV heads of 64), gate/up/down 3 x 8192 x
// 2048, two norms of 2048: 60,821,504; 16 layers 973,144,064; the final norm 2048. Sum
// 1,235,814,400.
TEST(HfConfig, Llama32OneBTiesItsEmbeddingsAndCounts1236MParameters) {
  const ModelPreset m = FromFile("Llama-3.2-1B");
  EXPECT_EQ(m.NumParams(), 1'235'814'400);
  EXPECT_EQ(m.Find("lm_head.weight"), nullptr);
  ASSERT_NE(m.Find("model.layers.15.self_attn.k_proj.weight"), nullptr);
  EXPECT_EQ(m.Find("model.layers.15.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{512, 2048}));
}

// Qwen3-8B: embed and lm_head 151936 x 4096 each, 622,329,856 twice; a layer: q and o 4096 x
// 4096, k and v 1024 x 4096 (8 KV heads of 128), q_norm and k_norm of 128, gate/up/down 3 x
// 12288 x 4096, two norms of 4096: 192,946,432; 36 layers 6,946,071,552; the final norm 4096.
// Sum 8,190,735,360.
TEST(HfConfig, Qwen3EightBHasQkNormsAndCounts8191MParameters) {
  const ModelPreset m = FromFile("Qwen3-8B");
  EXPECT_EQ(m.NumParams(), 8'190'735'360);
  ASSERT_NE(m.Find("model.layers.0.self_attn.q_norm.weight"), nullptr);
  EXPECT_EQ(m.Find("model.layers.0.self_attn.q_norm.weight")->shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.config().family, ModelFamily::kLlama);
}

// The newer form of Nemotron-H's pattern, a list of layer kinds, and its layer count from the
// list; a pattern with MoE layers (Nemotron-3's 'E') is refused.
TEST(HfConfig, NemotronHLayerKindsAsAList) {
  std::ifstream in(kHf + "Nemotron-H-8B-Base-8K/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string pattern =
      "\"hybrid_override_pattern\": \"M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-\"";
  ASSERT_NE(text.find(pattern), std::string::npos);
  std::string list = "\"layers_block_type\": [\"mamba\", \"mlp\", \"full_attention\", \"mlp\"]";
  text.replace(text.find(pattern), pattern.size(), list);
  text.replace(text.find("\"num_hidden_layers\": 52"), 23, "\"vocab_pad\": 0");
  Result<ModelConfig> c = ModelConfigFromHfConfig(text, "x", "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hybrid_pattern, "M-*-");
  EXPECT_EQ(c->num_layers, 4);
  text.replace(text.find("\"mlp\", \"full"), 5, "\"moe\"");
  c = ModelConfigFromHfConfig(text, "x", "x.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("MoE layers ('E')"), std::string::npos);
}

TEST(HfConfig, ADirectoryOrAJsonPathOrAPresetName) {
  EXPECT_EQ(ResolveModelConfig(kHf + "Qwen3-8B")->name, "Qwen3-8B");
  const std::string file = ::testing::TempDir() + "/my-model.json";
  std::filesystem::copy_file(kHf + "Qwen3-8B/config.json", file,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(ResolveModelConfig(file)->name, "my-model");
  EXPECT_EQ(ResolveModelConfig("qwen3-30b-a3b")->name, "qwen3-30b-a3b");
  const Result<ModelConfig> missing = ResolveModelConfig("/nonexistent/config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("/nonexistent/config.json"), std::string::npos);
  EXPECT_EQ(MakeModel(kHf + "Qwen3-8B", 1.0 / 64)->config().name, "Qwen3-8B@1/64");
}

// The Qwen3-8B config with `edit` applied, read (the error text when refused).
std::string RefusalOf(const std::string& key, const std::string& value,
                      const std::string& base = "Qwen3-8B") {
  std::ifstream in(kHf + base + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string quoted = "\"" + key + "\": ";
  const size_t at = text.find(quoted);
  if (at == std::string::npos) {
    text.insert(text.find('{') + 1, quoted + value + ",");
  } else {
    const size_t end = text.find_first_of(",\n}", at + quoted.size());
    text.replace(at + quoted.size(), end - at - quoted.size(), value);
  }
  Result<ModelConfig> c = ModelConfigFromHfConfig(text, "edited", "edited.json");
  return c.ok() ? "accepted" : c.status().ToString();
}

TEST(HfConfig, RefusalsNameTheField) {
  EXPECT_NE(RefusalOf("model_type", "\"qwen2\"").find("model_type 'qwen2' is not one ferry models"),
            std::string::npos);
  EXPECT_NE(RefusalOf("attention_bias", "true").find("'attention_bias' is true"),
            std::string::npos);
  EXPECT_NE(RefusalOf("mlp_bias", "true", "Llama-3.1-8B").find("'mlp_bias' is true"),
            std::string::npos);
  EXPECT_NE(RefusalOf("hidden_size", "\"4096\"").find("'hidden_size' is not an integer"),
            std::string::npos);
  EXPECT_NE(RefusalOf("num_hidden_layers", "-1").find("'num_hidden_layers' is -1, outside"),
            std::string::npos);
  EXPECT_NE(RefusalOf("vocab_size", "null").find("'vocab_size' is missing"), std::string::npos);
  EXPECT_NE(RefusalOf("torch_dtype", "\"int8\"").find("torch_dtype 'int8'"), std::string::npos);
  EXPECT_NE(RefusalOf("num_key_value_heads", "5").find("not a multiple of num_kv_heads 5"),
            std::string::npos);
  EXPECT_NE(RefusalOf("decoder_sparse_step", "2", "Qwen3-30B-A3B").find("decoder_sparse_step is 2"),
            std::string::npos);
  EXPECT_NE(RefusalOf("mlp_only_layers", "[0]", "Qwen3-30B-A3B").find("mlp_only_layers"),
            std::string::npos);
  EXPECT_NE(RefusalOf("moe_layer_freq", "2", "DeepSeek-V3").find("moe_layer_freq is 2"),
            std::string::npos);
  EXPECT_NE(RefusalOf("head_dim", "null", "Llama-3.1-8B").find("accepted"), std::string::npos);
  const Result<ModelConfig> not_json = ModelConfigFromHfConfig("{\"model_type\": ", "x", "x.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().ToString().find("x.json is not a JSON object"), std::string::npos);
}

// The checkpoint's dtype: torch_dtype, or its newer name dtype; bfloat16 when neither is given.
TEST(HfConfig, DTypeFromTorchDtypeOrDtype) {
  EXPECT_EQ(RefusalOf("torch_dtype", "\"float16\""), "accepted");
  std::ifstream in(kHf + "Qwen3-8B/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string field = "\"torch_dtype\": \"bfloat16\"";
  text.replace(text.find(field), field.size(), "\"dtype\": \"float32\"");
  EXPECT_EQ(ModelConfigFromHfConfig(text, "x", "x.json")->dtype, DType::kFP32);
  text.replace(text.find("\"dtype\": \"float32\""), 18, "\"other\": 0");
  EXPECT_EQ(ModelConfigFromHfConfig(text, "x", "x.json")->dtype, DType::kBF16);
}

}  // namespace
}  // namespace ferry::models
