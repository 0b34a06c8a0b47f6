// A model from its Hugging Face config.json, for models that are not built-in presets: the
// checkpoint's own description of its architecture (`model_type`, dims, head and expert counts)
// becomes a ModelConfig of one of ferry's families, whose tensor list, Megatron and vLLM layouts
// then follow as for a preset. Families read: llama and mistral (dense GQA), qwen3 (dense GQA
// with q/k norms), qwen3_moe, deepseek_v3 and kimi_k2 (MLA with routed and shared experts),
// nemotron_h (hybrid Mamba-2 / attention / MLP layers). An
// architecture ferry's family does not hold exactly (biases, MoE layers not every layer, other
// model types) is refused by name rather than approximated.
//
// Functions are pure except ResolveModelConfig, which reads a file; all are thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

// The config.json text `json` (untrusted: at most kMaxHfConfigBytes, every field checked) as a
// ModelConfig named `name`; InvalidArgument naming `source` (the file, for messages) and the
// field that is missing, of the wrong type, out of range, or describes tensors the family lacks.
Result<ModelConfig> ModelConfigFromHfConfig(const std::string& json, const std::string& name,
                                            const std::string& source);

// A preset name (PresetConfig), or a path to a Hugging Face config: a file ending in ".json", or
// a directory holding config.json. The model's name is the directory's name (the file's stem
// when it is not called config.json).
Result<ModelConfig> ResolveModelConfig(const std::string& model);

// ResolveModelConfig + ScaleConfig (when scale != 1) + ModelPreset::FromConfig: what `--model`
// and Python's Layout.preset take.
Result<ModelPreset> MakeModel(const std::string& model, double scale = 1.0);

// Largest config.json accepted (real ones are a few KiB).
inline constexpr int64_t kMaxHfConfigBytes = int64_t{1} << 20;

}  // namespace ferry::models
