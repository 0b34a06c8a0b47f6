// ModelConfigFromHfConfig: Hugging Face config.json fields to ferry's ModelConfig, family by
// family, with the upstream classes that give each field its meaning cited where it is read.
#include "tools/models/hf_config.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/base/file_io.h"

namespace ferry::models {
namespace {

using Json = nlohmann::json;

// Reads the fields of one config.json, naming the file and the field in every refusal.
class HfFields {
 public:
  HfFields(const Json& json, std::string source) : json_(json), source_(std::move(source)) {}

  Status Refuse(const std::string& why) const {
    return InvalidArgument("Hugging Face config " + source_ + ": " + why);
  }
  bool Has(const char* key) const { return json_.contains(key) && !json_.at(key).is_null(); }

  // A positive integer (or >= 0 when `zero_ok`); absent or null gives `fallback` when it is >= 0.
  Result<int64_t> Int(const char* key, int64_t fallback = -1, bool zero_ok = false) const {
    if (!Has(key)) {
      if (fallback >= 0) return fallback;
      return Refuse("'" + std::string(key) + "' is missing");
    }
    const Json& v = json_.at(key);
    if (!v.is_number_integer()) return Refuse("'" + std::string(key) + "' is not an integer");
    const int64_t n = v.get<int64_t>();
    if (n < 0 || (n == 0 && !zero_ok) || n > (int64_t{1} << 40)) {
      return Refuse("'" + std::string(key) + "' is " + std::to_string(n) + ", outside [" +
                    (zero_ok ? "0" : "1") + ", 2^40]");
    }
    return n;
  }
  Result<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!json_.at(key).is_boolean()) return Refuse("'" + std::string(key) + "' is not true/false");
    return json_.at(key).get<bool>();
  }
  Result<std::string> String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    if (!json_.at(key).is_string()) return Refuse("'" + std::string(key) + "' is not a string");
    return json_.at(key).get<std::string>();
  }
  // Refuses a flag the family's tensors cannot have (a bias ferry's tensor lists lack).
  Status RequireFalse(const char* key, const std::string& why) const {
    FERRY_ASSIGN_OR_RETURN(bool on, Bool(key, false));
    return on ? Refuse("'" + std::string(key) + "' is true: " + why) : Status::Ok();
  }
  const Json& json() const { return json_; }

 private:
  const Json& json_;
  std::string source_;
};

// The checkpoint's dtype: "torch_dtype" (or "dtype", its newer name); bfloat16 when absent.
Result<DType> HfDType(const HfFields& f) {
  FERRY_ASSIGN_OR_RETURN(std::string text, f.String("torch_dtype", ""));
  if (text.empty()) {
    FERRY_ASSIGN_OR_RETURN(text, f.String("dtype", "bfloat16"));
  }
  if (text == "bfloat16") return DType::kBF16;
  if (text == "float16") return DType::kFP16;
  if (text == "float32") return DType::kFP32;
  return f.Refuse("torch_dtype '" + text + "' is not one of bfloat16, float16, float32");
}

// Fields every family reads (transformers' LlamaConfig and its descendants): dims, heads, vocab,
// tied embeddings (default false), the GQA head size `head_dim`, which the attention classes take
// as hidden_size / num_attention_heads when the config has none
// (transformers/models/llama/modeling_llama.py, LlamaAttention: getattr(config, "head_dim", ...)),
// and num_key_value_heads, which defaults to num_attention_heads (configuration_llama.py).
// A hybrid model's layer count defaults to its pattern's length (`layers`, else -1: required).
Status ReadCommon(const HfFields& f, ModelConfig& c, int64_t layers = -1) {
  FERRY_ASSIGN_OR_RETURN(c.dtype, HfDType(f));
  FERRY_ASSIGN_OR_RETURN(c.hidden, f.Int("hidden_size"));
  FERRY_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers", layers));
  FERRY_ASSIGN_OR_RETURN(c.vocab, f.Int("vocab_size"));
  FERRY_ASSIGN_OR_RETURN(c.num_heads, f.Int("num_attention_heads"));
  FERRY_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", c.num_heads));
  FERRY_ASSIGN_OR_RETURN(c.tie_embeddings, f.Bool("tie_word_embeddings", false));
  if (c.hidden % c.num_heads != 0 && !f.Has("head_dim")) {
    return f.Refuse("no 'head_dim' and hidden_size " + std::to_string(c.hidden) +
                    " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  }
  FERRY_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", c.hidden / c.num_heads));
  return f.RequireFalse("attention_bias", "ferry's tensor lists have no q/k/v/o biases");
}

// llama, mistral (transformers/models/{llama,mistral}/modeling_*.py: q/k/v/o and gate/up/down
// projections, biases only with attention_bias / mlp_bias) and qwen3 (models/qwen3/modeling_qwen3.py:
// the same plus q_norm and k_norm of head_dim a layer).
Status ReadDense(const HfFields& f, bool qk_norm, ModelConfig& c) {
  c.family = ModelFamily::kLlama;
  c.qk_norm = qk_norm;
  FERRY_RETURN_IF_ERROR(ReadCommon(f, c));
  FERRY_ASSIGN_OR_RETURN(c.intermediate, f.Int("intermediate_size"));
  return f.RequireFalse("mlp_bias", "ferry's tensor lists have no MLP biases");
}

// qwen3_moe (transformers/models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeDecoderLayer): a layer
// is sparse unless it is in mlp_only_layers or (layer + 1) is not a multiple of
// decoder_sparse_step; ferry's family makes every layer sparse, so only step 1 and no dense
// layers are read. Experts: num_experts of moe_intermediate_size, no shared expert.
Status ReadQwen3Moe(const HfFields& f, ModelConfig& c) {
  c.family = ModelFamily::kQwen3Moe;
  c.qk_norm = true;
  FERRY_RETURN_IF_ERROR(ReadCommon(f, c));
  FERRY_ASSIGN_OR_RETURN(c.intermediate, f.Int("intermediate_size", 0, true));
  FERRY_ASSIGN_OR_RETURN(c.num_experts, f.Int("num_experts"));
  FERRY_ASSIGN_OR_RETURN(c.moe_intermediate, f.Int("moe_intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(int64_t step, f.Int("decoder_sparse_step", 1));
  if (step != 1) {
    return f.Refuse("decoder_sparse_step is " + std::to_string(step) +
                    ": ferry models Qwen3-MoE with every layer sparse (step 1)");
  }
  if (f.Has("mlp_only_layers") && !(f.json().at("mlp_only_layers").is_array() &&
                                    f.json().at("mlp_only_layers").empty())) {
    return f.Refuse("mlp_only_layers is not empty: ferry models Qwen3-MoE with every layer sparse");
  }
  return Status::Ok();
}

// deepseek_v3 and kimi_k2 (transformers/models/deepseek_v3/modeling_deepseek_v3.py and the
// checkpoints' own modeling_deepseek.py): MLA with q LoRA (q_lora_rank null: a plain q_proj),
// layers [0, first_k_dense_replace) dense, the others MoE when layer % moe_layer_freq == 0
// (ferry: every one, so frequency 1), n_shared_experts shared experts, the router's
// e_score_correction_bias when topk_method is "noaux_tc", num_nextn_predict_layers MTP layers.
Status ReadDeepseekV3(const HfFields& f, ModelConfig& c) {
  c.family = ModelFamily::kDeepseekV3;
  FERRY_ASSIGN_OR_RETURN(c.q_lora_rank, f.Int("q_lora_rank", 0, true));
  FERRY_ASSIGN_OR_RETURN(c.kv_lora_rank, f.Int("kv_lora_rank"));
  FERRY_ASSIGN_OR_RETURN(c.qk_nope_head_dim, f.Int("qk_nope_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.qk_rope_head_dim, f.Int("qk_rope_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.v_head_dim, f.Int("v_head_dim"));
  FERRY_RETURN_IF_ERROR(ReadCommon(f, c));
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  FERRY_ASSIGN_OR_RETURN(c.intermediate, f.Int("intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c.num_experts, f.Int("n_routed_experts"));
  FERRY_ASSIGN_OR_RETURN(c.num_shared_experts, f.Int("n_shared_experts", 0, true));
  FERRY_ASSIGN_OR_RETURN(c.moe_intermediate, f.Int("moe_intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c.first_dense_layers, f.Int("first_k_dense_replace", 0, true));
  FERRY_ASSIGN_OR_RETURN(int64_t frequency, f.Int("moe_layer_freq", 1));
  if (frequency != 1) {
    return f.Refuse("moe_layer_freq is " + std::to_string(frequency) +
                    ": ferry models every layer after first_k_dense_replace as MoE (frequency 1)");
  }
  FERRY_ASSIGN_OR_RETURN(std::string topk, f.String("topk_method", ""));
  c.router_bias = topk == "noaux_tc";
  FERRY_ASSIGN_OR_RETURN(c.expert_groups, f.Int("n_group", 0, true));
  FERRY_ASSIGN_OR_RETURN(c.nextn_layers, f.Int("num_nextn_predict_layers", 0, true));
  return Status::Ok();
}

// The layer pattern of nemotron_h: hybrid_override_pattern ('M' Mamba-2, '*' attention, '-' MLP,
// 'E' MoE), or layers_block_type, its newer list form ("mamba"/"linear_attention",
// "attention"/"full_attention", "mlp", "moe": transformers/models/nemotron_h/
// configuration_nemotron_h.py, _pattern_to_list). ferry's family has no MoE layers.
Result<std::string> HybridPattern(const HfFields& f) {
  std::string pattern;
  if (f.Has("hybrid_override_pattern")) {
    FERRY_ASSIGN_OR_RETURN(pattern, f.String("hybrid_override_pattern", ""));
  } else if (f.Has("layers_block_type") && f.json().at("layers_block_type").is_array()) {
    for (const Json& kind : f.json().at("layers_block_type")) {
      const std::string k = kind.is_string() ? kind.get<std::string>() : "";
      pattern += k == "mamba" || k == "linear_attention"   ? 'M'
                 : k == "attention" || k == "full_attention" ? '*'
                 : k == "mlp"                              ? '-'
                 : k == "moe"                              ? 'E'
                                                           : '?';
    }
  } else {
    return f.Refuse("neither 'hybrid_override_pattern' nor a 'layers_block_type' list");
  }
  if (pattern.find('E') != std::string::npos) {
    return f.Refuse("the layer pattern has MoE layers ('E'), which ferry's Nemotron-H lacks");
  }
  return pattern;
}

// nemotron_h (transformers/models/nemotron_h/modeling_nemotron_h.py): Mamba-2 mixers of
// mamba_num_heads x mamba_head_dim with n_groups groups of ssm_state_size (older configs:
// mamba_n_groups, mamba_d_conv), a conv1d with bias (use_conv_bias), GQA attention and relu^2
// MLPs, none with biases. head_dim is attention_head_dim in the checkpoints' own configs.
Status ReadNemotronH(const HfFields& f, ModelConfig& c) {
  c.family = ModelFamily::kNemotronH;
  FERRY_ASSIGN_OR_RETURN(c.hybrid_pattern, HybridPattern(f));
  FERRY_RETURN_IF_ERROR(ReadCommon(f, c, static_cast<int64_t>(c.hybrid_pattern.size())));
  if (!f.Has("head_dim") && f.Has("attention_head_dim")) {
    FERRY_ASSIGN_OR_RETURN(c.head_dim, f.Int("attention_head_dim"));
  }
  FERRY_ASSIGN_OR_RETURN(c.intermediate, f.Int("intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c.mamba_num_heads, f.Int("mamba_num_heads"));
  FERRY_ASSIGN_OR_RETURN(c.mamba_head_dim, f.Int("mamba_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.ssm_state_size, f.Int("ssm_state_size"));
  FERRY_ASSIGN_OR_RETURN(c.mamba_groups, f.Int(f.Has("n_groups") ? "n_groups" : "mamba_n_groups"));
  FERRY_ASSIGN_OR_RETURN(c.conv_kernel, f.Int(f.Has("conv_kernel") ? "conv_kernel" : "mamba_d_conv"));
  for (const char* bias : {"use_bias", "mlp_bias", "mamba_proj_bias"}) {
    FERRY_RETURN_IF_ERROR(f.RequireFalse(bias, "ferry's Nemotron-H tensor lists have no such bias"));
  }
  FERRY_ASSIGN_OR_RETURN(bool conv_bias, f.Bool("use_conv_bias", true));
  if (!conv_bias) return f.Refuse("'use_conv_bias' is false: ferry's Mamba mixers hold conv1d.bias");
  return Status::Ok();
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// "/m/Qwen3-8B/config.json" -> "Qwen3-8B"; "/m/my-model.json" -> "my-model".
std::string ModelNameOfConfigPath(const std::string& file) {
  const size_t slash = file.rfind('/');
  const std::string base = slash == std::string::npos ? file : file.substr(slash + 1);
  if (base != "config.json") return base.substr(0, base.size() - 5);
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  const size_t parent = dir.rfind('/');
  return parent == std::string::npos ? dir : dir.substr(parent + 1);
}

}  // namespace

Result<ModelConfig> ModelConfigFromHfConfig(const std::string& json, const std::string& name,
                                            const std::string& source) {
  if (static_cast<int64_t>(json.size()) > kMaxHfConfigBytes) {
    return InvalidArgument("Hugging Face config " + source + " is larger than kMaxHfConfigBytes");
  }
  Json parsed = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("Hugging Face config " + source + " is not a JSON object");
  }
  const HfFields f(parsed, source);
  FERRY_ASSIGN_OR_RETURN(std::string type, f.String("model_type", ""));
  ModelConfig c;
  c.name = name;
  if (type == "llama" || type == "mistral") {
    FERRY_RETURN_IF_ERROR(ReadDense(f, /*qk_norm=*/false, c));
  } else if (type == "qwen3") {
    FERRY_RETURN_IF_ERROR(ReadDense(f, /*qk_norm=*/true, c));
  } else if (type == "qwen3_moe") {
    FERRY_RETURN_IF_ERROR(ReadQwen3Moe(f, c));
  } else if (type == "deepseek_v3" || type == "kimi_k2") {
    FERRY_RETURN_IF_ERROR(ReadDeepseekV3(f, c));
  } else if (type == "nemotron_h") {
    FERRY_RETURN_IF_ERROR(ReadNemotronH(f, c));
  } else {
    return f.Refuse("model_type '" + type +
                    "' is not one ferry models (llama, mistral, qwen3, qwen3_moe, deepseek_v3, "
                    "kimi_k2, nemotron_h)");
  }
  FERRY_RETURN_IF_ERROR(c.Validate().WithContext("Hugging Face config " + source));
  return c;
}

Result<ModelConfig> ResolveModelConfig(const std::string& model) {
  const bool is_json = model.size() > 5 && model.compare(model.size() - 5, 5, ".json") == 0;
  if (!is_json && !IsDirectory(model)) return PresetConfig(model);
  const std::string file = is_json ? model : model + "/config.json";
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileAtMost(file, kMaxHfConfigBytes,
                                                          "Hugging Face config", "kMaxHfConfigBytes"));
  return ModelConfigFromHfConfig(text, ModelNameOfConfigPath(file), file);
}

Result<ModelPreset> MakeModel(const std::string& model, double scale) {
  FERRY_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(model));
  if (scale != 1.0) {
    FERRY_ASSIGN_OR_RETURN(config, ScaleConfig(config, scale));
  }
  return ModelPreset::FromConfig(config);
}

}  // namespace ferry::models
