// Model presets: the weight tensors (Hugging Face names, shapes, dtype) and structural config of real
// models, from their public configs, for planning and simulating refits without the checkpoints.
// Families: Llama (dense GQA, with Qwen2's q/k/v biases or Qwen3's q/k norms), Qwen3-MoE (GQA + QK norm + routed experts), DeepSeek-V3 (MLA with
// q/kv LoRA, dense-then-MoE, shared expert, multi-token prediction layers) and Nemotron-H (hybrid
// Mamba-2 / attention / MLP layers). `ScaleConfig` shrinks the dims while keeping the structure, for
// local runs.
//
// Everything here is a plain value; functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::models {

enum class ModelFamily {
  kLlama,       // dense decoder: GQA attention + SwiGLU MLP
  kQwen3Moe,    // GQA attention with q/k RMSNorm + routed SwiGLU experts (no shared expert)
  kDeepseekV3,  // MLA attention + dense SwiGLU for the first layers, then routed + shared experts
  kNemotronH,   // hybrid: each layer is one of Mamba-2, attention or a non-gated (relu^2) MLP
};

// What one layer computes. Decoder layers hold attention and an MLP (dense or MoE); Nemotron-H
// layers hold exactly one mixer.
enum class LayerKind { kDecoder, kMamba, kAttention, kMlp };

struct ModelConfig {
  std::string name;
  ModelFamily family = ModelFamily::kLlama;
  DType dtype = DType::kBF16;

  int64_t hidden = 0;
  int64_t num_layers = 0;
  int64_t vocab = 0;
  bool tie_embeddings = false;

  // Attention (GQA). head_dim is the q/k/v head size; for MLA see the fields below.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm weights q_norm / k_norm of size head_dim
  // Qwen2: q_proj, k_proj and v_proj carry biases ([heads*head_dim], [kv*head_dim] twice), o_proj
  // none (transformers/models/qwen2/modeling_qwen2.py Qwen2Attention). Dense family only.
  bool qkv_bias = false;

  // Dense MLP (gated SwiGLU unless the family is Nemotron-H).
  int64_t intermediate = 0;

  // Mixture of experts. Layers [0, first_dense_layers) are dense.
  int64_t num_experts = 0;
  int64_t num_shared_experts = 0;  // shared expert FFN size = num_shared_experts * moe_intermediate
  int64_t moe_intermediate = 0;
  int64_t first_dense_layers = 0;
  bool router_bias = false;  // DeepSeek's e_score_correction_bias (fp32)
  int64_t expert_groups = 0;  // DeepSeek's n_group: experts routed in groups (0: no groups)

  // Multi-head latent attention (DeepSeek-V3). Active when kv_lora_rank > 0.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Hybrid Mamba-2 (Nemotron-H). One pattern character per layer: 'M' Mamba-2, '*' attention,
  // '-' MLP.
  std::string hybrid_pattern;
  int64_t mamba_num_heads = 0;
  int64_t mamba_head_dim = 0;
  int64_t ssm_state_size = 0;
  int64_t mamba_groups = 0;
  int64_t conv_kernel = 0;

  // Multi-token prediction (DeepSeek-V3): the checkpoint's num_nextn_predict_layers MTP layers,
  // "model.layers.<num_layers + i>.*", each an embedding norm (enorm), a hidden-state norm (hnorm),
  // eh_proj [hidden, 2*hidden] over [enorm(embedding); hnorm(hidden)], a decoder layer like the last
  // one and the shared head's norm (shared_head.norm). Their copies of the embedding and output
  // layer (embed_tokens, shared_head.head) are the model's own, left out. mtp_layers: how many of
  // them this preset's tensor list holds (0 by default: the published parameter count excludes
  // them; WithMtpLayers adds them).
  int64_t nextn_layers = 0;
  int64_t mtp_layers = 0;

  // The parameter count the model's authors publish (0 when unknown, e.g. for a scaled config).
  double published_params = 0;

  bool IsMoe() const { return num_experts > 0; }
  bool IsMla() const { return kv_lora_rank > 0; }
  LayerKind KindOfLayer(int64_t layer) const;
  // True for a decoder layer whose MLP is a mixture of experts; an MTP layer (layer >= num_layers)
  // is one when the last decoder layer is.
  bool IsMoeLayer(int64_t layer) const;
  int64_t MambaInner() const { return mamba_num_heads * mamba_head_dim; }
  // Channels through Mamba's causal conv: x, B and C.
  int64_t MambaConvDim() const { return MambaInner() + 2 * mamba_groups * ssm_state_size; }
  // Rows of Mamba's in_proj: z, x, B, C and dt.
  int64_t MambaInProjRows() const { return 2 * MambaInner() + 2 * mamba_groups * ssm_state_size + mamba_num_heads; }
  // Checks the config is self-consistent (positive dims, pattern length, head divisibility).
  Status Validate() const;
};

// A model: its config and every logical weight tensor, in checkpoint order.
class ModelPreset {
 public:
  // Builds the tensor list from `config` (validated first).
  static Result<ModelPreset> FromConfig(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The tensor with this Hugging Face name, or nullptr.
  const TensorSpec* Find(const std::string& name) const;
  int64_t NumParams() const;
  int64_t NumBytes() const;

 private:
  ModelConfig config_;
  std::vector<TensorSpec> tensors_;
  std::unordered_map<std::string, int> index_;
};

// `preset` with its first `mtp_layers` MTP layers' tensors (0: none); InvalidArgument when the
// model's checkpoint carries fewer (ModelConfig::nextn_layers).
Result<ModelPreset> WithMtpLayers(const ModelPreset& preset, int64_t mtp_layers);

// Names of the built-in presets: llama-3.1-8b, llama-3.1-70b, qwen3-30b-a3b, qwen3-235b-a22b,
// deepseek-v3, kimi-k2, nemotron-h-8b.
std::vector<std::string> PresetNames();
// The config of a built-in preset; NotFound naming the known presets otherwise.
Result<ModelConfig> PresetConfig(const std::string& name);

// Shrinks the wide dims (hidden, intermediate sizes, vocab, head sizes, LoRA ranks, Mamba head and
// state sizes) by `scale` in (0, 1], keeping layer, head, kv-head, expert and group counts. Wide dims
// round up to a multiple of 16 (so tensor parallelism up to 16 still divides them), head sizes to a
// multiple of 2. The name gets a "@1/64"-style suffix; published_params becomes 0.
Result<ModelConfig> ScaleConfig(const ModelConfig& config, double scale);
// Parses "1/64", "0.015625" or "1" into a scale in (0, 1].
Result<double> ParseScale(const std::string& text);

// PresetConfig + ScaleConfig (when scale != 1) + ModelPreset::FromConfig.
Result<ModelPreset> MakePreset(const std::string& name, double scale = 1.0);

// Helpers naming per-layer tensors the way Hugging Face checkpoints do; `prefix` is "model" for
// most families and "backbone" for Nemotron-H.
std::string LayerTensorName(const ModelConfig& config, int64_t layer, const std::string& suffix);
// The checkpoint name of MTP layer `mtp` (0-based): LayerTensorName of layer num_layers + mtp.
std::string MtpTensorName(const ModelConfig& config, int64_t mtp, const std::string& suffix);
std::string ExpertTensorName(const ModelConfig& config, int64_t layer, int64_t expert,
                             const std::string& proj);  // proj: gate_proj, up_proj or down_proj
// The tensor stack of one projection of every routed expert of `layer` (core/layout/
// tensor_stack.h): "model.layers.<layer>.mlp.experts.[0:E].<proj>.weight", whose member e is
// ExpertTensorName(config, layer, e, proj).
std::string ExpertStackName(const ModelConfig& config, int64_t layer, const std::string& proj);

}  // namespace ferry::models
