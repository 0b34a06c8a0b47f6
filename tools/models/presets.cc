// Built-in model presets and the tensor lists derived from a ModelConfig.
#include "tools/models/presets.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/base/strings.h"

namespace ferry::models {

namespace {

std::string Prefix(const ModelConfig& c) {
  return c.family == ModelFamily::kNemotronH ? "backbone" : "model";
}

ModelConfig Llama(std::string name, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                  int64_t intermediate, double published) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = ModelFamily::kLlama;
  c.hidden = hidden;
  c.num_layers = layers;
  c.vocab = 128256;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 128;
  c.intermediate = intermediate;
  c.published_params = published;
  return c;
}

ModelConfig Qwen3Moe(std::string name, int64_t hidden, int64_t layers, int64_t heads,
                     int64_t kv_heads, int64_t intermediate, int64_t moe_intermediate,
                     double published) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = ModelFamily::kQwen3Moe;
  c.hidden = hidden;
  c.num_layers = layers;
  c.vocab = 151936;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 128;
  c.qk_norm = true;
  c.intermediate = intermediate;
  c.num_experts = 128;
  c.moe_intermediate = moe_intermediate;
  c.published_params = published;
  return c;
}

ModelConfig DeepseekV3Like(std::string name, int64_t heads, int64_t experts, int64_t dense_layers,
                           int64_t vocab, int64_t expert_groups, int64_t nextn_layers,
                           double published) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = ModelFamily::kDeepseekV3;
  c.hidden = 7168;
  c.num_layers = 61;
  c.vocab = vocab;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.intermediate = 18432;
  c.num_experts = experts;
  c.num_shared_experts = 1;
  c.moe_intermediate = 2048;
  c.first_dense_layers = dense_layers;
  c.router_bias = true;
  c.expert_groups = expert_groups;
  c.nextn_layers = nextn_layers;
  c.published_params = published;
  return c;
}

ModelConfig NemotronH8B() {
  ModelConfig c;
  c.name = "nemotron-h-8b";
  c.family = ModelFamily::kNemotronH;
  c.hidden = 4096;
  c.num_layers = 52;
  c.vocab = 131072;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate = 21504;
  c.hybrid_pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  c.mamba_num_heads = 128;
  c.mamba_head_dim = 64;
  c.ssm_state_size = 128;
  c.mamba_groups = 8;
  c.conv_kernel = 4;
  c.published_params = 8.1e9;
  return c;
}

std::vector<ModelConfig> AllPresets() {
  return {
      Llama("llama-3.1-8b", 4096, 32, 32, 8, 14336, 8.03e9),
      Llama("llama-3.1-70b", 8192, 80, 64, 8, 28672, 70.6e9),
      Qwen3Moe("qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 768, 30.5e9),
      Qwen3Moe("qwen3-235b-a22b", 4096, 94, 64, 4, 12288, 1536, 235e9),
      // n_group 8, num_nextn_predict_layers 1
      DeepseekV3Like("deepseek-v3", 128, 256, 3, 129280, 8, 1, 671e9),
      // n_group 1, num_nextn_predict_layers 0 (its config.json ships no MTP layer)
      DeepseekV3Like("kimi-k2", 64, 384, 1, 163840, 1, 0, 1.03e12),
      NemotronH8B(),
  };
}

class TensorListBuilder {
 public:
  explicit TensorListBuilder(const ModelConfig& c) : c_(c) {}

  void Add(std::string name, std::vector<int64_t> shape, DType dtype) {
    out_.push_back({std::move(name), std::move(shape), dtype});
  }
  void Add(std::string name, std::vector<int64_t> shape) { Add(std::move(name), std::move(shape), c_.dtype); }
  void AddLayer(int64_t layer, const std::string& suffix, std::vector<int64_t> shape,
                DType dtype) {
    Add(LayerTensorName(c_, layer, suffix), std::move(shape), dtype);
  }
  void AddLayer(int64_t layer, const std::string& suffix, std::vector<int64_t> shape) {
    AddLayer(layer, suffix, std::move(shape), c_.dtype);
  }

  std::vector<TensorSpec> Build() {
    const int64_t h = c_.hidden;
    if (c_.family == ModelFamily::kNemotronH) {
      Add("backbone.embeddings.weight", {c_.vocab, h});
    } else {
      Add("model.embed_tokens.weight", {c_.vocab, h});
    }
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      switch (c_.KindOfLayer(l)) {
        case LayerKind::kDecoder: DecoderLayer(l); break;
        case LayerKind::kMamba: MambaLayer(l); break;
        case LayerKind::kAttention:
          AddLayer(l, "norm.weight", {h});
          GqaAttention(l, "mixer.");
          break;
        case LayerKind::kMlp:
          AddLayer(l, "norm.weight", {h});
          AddLayer(l, "mixer.up_proj.weight", {c_.intermediate, h});
          AddLayer(l, "mixer.down_proj.weight", {h, c_.intermediate});
          break;
      }
    }
    Add(c_.family == ModelFamily::kNemotronH ? "backbone.norm_f.weight" : "model.norm.weight", {h});
    if (!c_.tie_embeddings) Add("lm_head.weight", {c_.vocab, h});
    for (int64_t i = 0; i < c_.mtp_layers; ++i) MtpLayer(c_.num_layers + i);
    return std::move(out_);
  }

 private:
  void GqaAttention(int64_t l, const std::string& module) {
    const int64_t h = c_.hidden;
    // each bias after its weight, as Qwen2Attention's named_parameters() lists them
    const std::array<std::pair<const char*, int64_t>, 3> projections{
        {{"q_proj.", c_.num_heads}, {"k_proj.", c_.num_kv_heads}, {"v_proj.", c_.num_kv_heads}}};
    for (const auto& [proj, heads] : projections) {
      AddLayer(l, module + proj + "weight", {heads * c_.head_dim, h});
      if (c_.qkv_bias) AddLayer(l, module + proj + "bias", {heads * c_.head_dim});
    }
    AddLayer(l, module + "o_proj.weight", {h, c_.num_heads * c_.head_dim});
    if (c_.qk_norm) {
      AddLayer(l, module + "q_norm.weight", {c_.head_dim});
      AddLayer(l, module + "k_norm.weight", {c_.head_dim});
    }
  }

  void MlaAttention(int64_t l) {
    const int64_t h = c_.hidden;
    const int64_t qk_head = c_.qk_nope_head_dim + c_.qk_rope_head_dim;
    if (c_.q_lora_rank > 0) {
      AddLayer(l, "self_attn.q_a_proj.weight", {c_.q_lora_rank, h});
      AddLayer(l, "self_attn.q_a_layernorm.weight", {c_.q_lora_rank});
      AddLayer(l, "self_attn.q_b_proj.weight", {c_.num_heads * qk_head, c_.q_lora_rank});
    } else {
      AddLayer(l, "self_attn.q_proj.weight", {c_.num_heads * qk_head, h});
    }
    AddLayer(l, "self_attn.kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, h});
    AddLayer(l, "self_attn.kv_a_layernorm.weight", {c_.kv_lora_rank});
    AddLayer(l, "self_attn.kv_b_proj.weight",
             {c_.num_heads * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank});
    AddLayer(l, "self_attn.o_proj.weight", {h, c_.num_heads * c_.v_head_dim});
  }

  void GatedMlp(int64_t l, const std::string& module, int64_t inter) {
    const int64_t h = c_.hidden;
    AddLayer(l, module + "gate_proj.weight", {inter, h});
    AddLayer(l, module + "up_proj.weight", {inter, h});
    AddLayer(l, module + "down_proj.weight", {h, inter});
  }

  void DecoderLayer(int64_t l) {
    const int64_t h = c_.hidden;
    AddLayer(l, "input_layernorm.weight", {h});
    if (c_.IsMla()) {
      MlaAttention(l);
    } else {
      GqaAttention(l, "self_attn.");
    }
    AddLayer(l, "post_attention_layernorm.weight", {h});
    if (!c_.IsMoeLayer(l)) {
      GatedMlp(l, "mlp.", c_.intermediate);
      return;
    }
    AddLayer(l, "mlp.gate.weight", {c_.num_experts, h});
    if (c_.router_bias) AddLayer(l, "mlp.gate.e_score_correction_bias", {c_.num_experts}, DType::kFP32);
    for (int64_t e = 0; e < c_.num_experts; ++e) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        std::vector<int64_t> shape = std::string(proj) == "down_proj"
                                         ? std::vector<int64_t>{h, c_.moe_intermediate}
                                         : std::vector<int64_t>{c_.moe_intermediate, h};
        Add(ExpertTensorName(c_, l, e, proj), std::move(shape));
      }
    }
    if (c_.num_shared_experts > 0) {
      GatedMlp(l, "mlp.shared_experts.", c_.num_shared_experts * c_.moe_intermediate);
    }
  }

  // DeepSeek-V3's checkpoint: model.layers.<61 + i>.{enorm, hnorm, eh_proj, shared_head.norm} and
  // a decoder layer under the same prefix (modeling_deepseek.py / Megatron-Bridge's
  // src/megatron/bridge/models/deepseek/common.py MTP mappings).
  void MtpLayer(int64_t l) {
    const int64_t h = c_.hidden;
    AddLayer(l, "enorm.weight", {h});
    AddLayer(l, "hnorm.weight", {h});
    AddLayer(l, "eh_proj.weight", {h, 2 * h});
    DecoderLayer(l);
    AddLayer(l, "shared_head.norm.weight", {h});
  }

  void MambaLayer(int64_t l) {
    const int64_t h = c_.hidden;
    AddLayer(l, "norm.weight", {h});
    AddLayer(l, "mixer.in_proj.weight", {c_.MambaInProjRows(), h});
    AddLayer(l, "mixer.conv1d.weight", {c_.MambaConvDim(), 1, c_.conv_kernel});
    AddLayer(l, "mixer.conv1d.bias", {c_.MambaConvDim()});
    AddLayer(l, "mixer.A_log", {c_.mamba_num_heads});
    AddLayer(l, "mixer.D", {c_.mamba_num_heads});
    AddLayer(l, "mixer.dt_bias", {c_.mamba_num_heads});
    AddLayer(l, "mixer.norm.weight", {c_.MambaInner()});
    AddLayer(l, "mixer.out_proj.weight", {h, c_.MambaInner()});
  }

  const ModelConfig& c_;
  std::vector<TensorSpec> out_;
};

int64_t ScaleDim(int64_t dim, double scale, int64_t multiple) {
  if (dim <= 0) return dim;
  auto scaled = static_cast<int64_t>(std::ceil(static_cast<double>(dim) * scale - 1e-9));
  scaled = (scaled + multiple - 1) / multiple * multiple;
  return std::max(scaled, multiple);
}

}  // namespace

LayerKind ModelConfig::KindOfLayer(int64_t layer) const {
  if (family != ModelFamily::kNemotronH) return LayerKind::kDecoder;
  switch (hybrid_pattern[static_cast<size_t>(layer)]) {
    case 'M': return LayerKind::kMamba;
    case '*': return LayerKind::kAttention;
    default: return LayerKind::kMlp;
  }
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (layer >= num_layers) return IsMoeLayer(num_layers - 1);
  return IsMoe() && KindOfLayer(layer) == LayerKind::kDecoder && layer >= first_dense_layers;
}

Status ModelConfig::Validate() const {
  auto positive = [&](int64_t v, const char* what) -> Status {
    if (v <= 0) {
      return InvalidArgument("model '" + name + "': " + what + " must be positive, got " +
                             std::to_string(v));
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(positive(hidden, "hidden"));
  FERRY_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  FERRY_RETURN_IF_ERROR(positive(vocab, "vocab"));
  FERRY_RETURN_IF_ERROR(positive(num_heads, "num_heads"));
  FERRY_RETURN_IF_ERROR(positive(num_kv_heads, "num_kv_heads"));
  FERRY_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgument("model '" + name + "': num_heads " + std::to_string(num_heads) +
                           " is not a multiple of num_kv_heads " + std::to_string(num_kv_heads));
  }
  if (qkv_bias && family != ModelFamily::kLlama) {
    return InvalidArgument("model '" + name + "': q/k/v biases (qkv_bias) are modelled for the "
                           "dense family only");
  }
  if (IsMoe()) {
    FERRY_RETURN_IF_ERROR(positive(moe_intermediate, "moe_intermediate"));
    if (first_dense_layers > num_layers) {
      return InvalidArgument("model '" + name + "': first_dense_layers exceeds num_layers");
    }
  }
  if (first_dense_layers > 0 || !IsMoe() || family == ModelFamily::kNemotronH) {
    FERRY_RETURN_IF_ERROR(positive(intermediate, "intermediate"));
  }
  if (IsMla()) {
    FERRY_RETURN_IF_ERROR(positive(qk_nope_head_dim, "qk_nope_head_dim"));
    FERRY_RETURN_IF_ERROR(positive(qk_rope_head_dim, "qk_rope_head_dim"));
    FERRY_RETURN_IF_ERROR(positive(v_head_dim, "v_head_dim"));
  }
  if (nextn_layers < 0 || mtp_layers < 0 || mtp_layers > nextn_layers) {
    return InvalidArgument("model '" + name + "': " + std::to_string(mtp_layers) +
                           " MTP layers asked for, its checkpoint carries " +
                           std::to_string(nextn_layers) + " (num_nextn_predict_layers)");
  }
  // Hybrid MTP (vllm/model_executor/models/nemotron_h_mtp.py: mtp_hybrid_override_pattern of
  // attention '*' and MoE 'E' layers, "mtp.layers.<i>.*", one depth) needs Nemotron-H MoE layers,
  // which ferry does not model.
  if (nextn_layers > 0 && (family == ModelFamily::kNemotronH || tie_embeddings)) {
    return InvalidArgument("model '" + name + "': MTP layers are modelled for untied GPT models "
                           "only (a hybrid model's MTP layers, vLLM's NemotronHMTP, are attention "
                           "and MoE layers of a pattern of their own, not modelled)");
  }
  if (family == ModelFamily::kNemotronH) {
    if (static_cast<int64_t>(hybrid_pattern.size()) != num_layers) {
      return InvalidArgument("model '" + name + "': hybrid pattern has " +
                             std::to_string(hybrid_pattern.size()) + " characters for " +
                             std::to_string(num_layers) + " layers");
    }
    for (char ch : hybrid_pattern) {
      if (ch != 'M' && ch != '*' && ch != '-') {
        return InvalidArgument("model '" + name + "': hybrid pattern character '" +
                               std::string(1, ch) + "' is not one of M, *, -");
      }
    }
    FERRY_RETURN_IF_ERROR(positive(mamba_num_heads, "mamba_num_heads"));
    FERRY_RETURN_IF_ERROR(positive(mamba_head_dim, "mamba_head_dim"));
    FERRY_RETURN_IF_ERROR(positive(ssm_state_size, "ssm_state_size"));
    FERRY_RETURN_IF_ERROR(positive(mamba_groups, "mamba_groups"));
    FERRY_RETURN_IF_ERROR(positive(conv_kernel, "conv_kernel"));
    if (mamba_num_heads % mamba_groups != 0) {
      return InvalidArgument("model '" + name + "': mamba_num_heads is not a multiple of mamba_groups");
    }
  }
  return Status::Ok();
}

Result<ModelPreset> WithMtpLayers(const ModelPreset& preset, int64_t mtp_layers) {
  if (preset.config().mtp_layers == mtp_layers) return preset;
  ModelConfig c = preset.config();
  c.mtp_layers = mtp_layers;
  return ModelPreset::FromConfig(c);
}

Result<ModelPreset> ModelPreset::FromConfig(const ModelConfig& config) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  ModelPreset preset;
  preset.config_ = config;
  preset.tensors_ = TensorListBuilder(config).Build();
  preset.index_.reserve(preset.tensors_.size());
  for (size_t i = 0; i < preset.tensors_.size(); ++i) {
    preset.index_.emplace(preset.tensors_[i].name, static_cast<int>(i));
  }
  return preset;
}

const TensorSpec* ModelPreset::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

int64_t ModelPreset::NumParams() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors_) n += t.NumElements();
  return n;
}

int64_t ModelPreset::NumBytes() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors_) n += t.NumBytes();
  return n;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const ModelConfig& c : AllPresets()) names.push_back(c.name);
  return names;
}

Result<ModelConfig> PresetConfig(const std::string& name) {
  std::string known;
  for (const ModelConfig& c : AllPresets()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  return NotFound("unknown model preset '" + name + "' (known: " + known + ")");
}

Result<ModelConfig> ScaleConfig(const ModelConfig& config, double scale) {
  if (!(scale > 0.0) || scale > 1.0) {
    return InvalidArgument("model scale must be in (0, 1], got " + std::to_string(scale));
  }
  if (scale == 1.0) return config;
  ModelConfig c = config;
  constexpr int64_t kWide = 16;
  constexpr int64_t kHead = 2;
  c.hidden = ScaleDim(c.hidden, scale, kWide);
  c.intermediate = ScaleDim(c.intermediate, scale, kWide);
  c.moe_intermediate = ScaleDim(c.moe_intermediate, scale, kWide);
  c.vocab = ScaleDim(c.vocab, scale, kWide);
  c.q_lora_rank = ScaleDim(c.q_lora_rank, scale, kWide);
  c.kv_lora_rank = ScaleDim(c.kv_lora_rank, scale, kWide);
  c.head_dim = ScaleDim(c.head_dim, scale, kHead);
  c.qk_nope_head_dim = ScaleDim(c.qk_nope_head_dim, scale, kHead);
  c.qk_rope_head_dim = ScaleDim(c.qk_rope_head_dim, scale, kHead);
  c.v_head_dim = ScaleDim(c.v_head_dim, scale, kHead);
  if (c.IsMla()) c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.mamba_head_dim = ScaleDim(c.mamba_head_dim, scale, kHead);
  c.ssm_state_size = ScaleDim(c.ssm_state_size, scale, kHead);
  c.published_params = 0;
  double inverse = 1.0 / scale;
  char suffix[48];
  if (std::abs(inverse - std::round(inverse)) < 1e-9) {
    std::snprintf(suffix, sizeof(suffix), "@1/%lld", static_cast<long long>(std::llround(inverse)));
  } else {
    std::snprintf(suffix, sizeof(suffix), "@%g", scale);
  }
  c.name += suffix;
  FERRY_RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<double> ParseScale(const std::string& text) {
  std::string t = Trim(text);
  auto parse_number = [](const std::string& s, double* out) {
    if (s.empty()) return false;
    char* end = nullptr;
    *out = std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
  };
  double value = 0;
  size_t slash = t.find('/');
  bool ok;
  if (slash == std::string::npos) {
    ok = parse_number(t, &value);
  } else {
    double num = 0, den = 0;
    ok = parse_number(Trim(t.substr(0, slash)), &num) && parse_number(Trim(t.substr(slash + 1)), &den) &&
         den != 0;
    value = ok ? num / den : 0;
  }
  if (!ok || !(value > 0.0) || value > 1.0) {
    return InvalidArgument("bad model scale '" + text + "': expected a number in (0, 1] such as 1/64 or 0.25");
  }
  return value;
}

Result<ModelPreset> MakePreset(const std::string& name, double scale) {
  FERRY_ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(name));
  FERRY_ASSIGN_OR_RETURN(config, ScaleConfig(config, scale));
  return ModelPreset::FromConfig(config);
}

std::string LayerTensorName(const ModelConfig& config, int64_t layer, const std::string& suffix) {
  return Prefix(config) + ".layers." + std::to_string(layer) + "." + suffix;
}

std::string MtpTensorName(const ModelConfig& config, int64_t mtp, const std::string& suffix) {
  return LayerTensorName(config, config.num_layers + mtp, suffix);
}

std::string ExpertTensorName(const ModelConfig& config, int64_t layer, int64_t expert,
                             const std::string& proj) {
  return Prefix(config) + ".layers." + std::to_string(layer) + ".mlp.experts." +
         std::to_string(expert) + "." + proj + ".weight";
}

std::string ExpertStackName(const ModelConfig& config, int64_t layer, const std::string& proj) {
  return Prefix(config) + ".layers." + std::to_string(layer) + ".mlp.experts.[0:" +
         std::to_string(config.num_experts) + "]." + proj + ".weight";
}

}  // namespace ferry::models
