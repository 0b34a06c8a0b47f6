// SGLang's split of a model over PP ranks (tools/models/sglang_pipeline.h). Paths are SGLang
// 0.5.23's, under python/sglang/srt.
#include "tools/models/sglang_pipeline.h"

#include <string>

#include "tools/models/vllm_pipeline.h"

namespace ferry::models {

Result<std::vector<int64_t>> SglangPipelineLayers(int64_t num_layers, int pp,
                                                  const std::vector<int>& partition) {
  if (pp < 1) return InvalidArgument("pp " + std::to_string(pp) + " is not positive");
  // utils/common.py make_layers: assert not pp_size or num_hidden_layers >= pp_size
  if (num_layers < pp) {
    return InvalidArgument("pp=" + std::to_string(pp) + " exceeds the model's " +
                           std::to_string(num_layers) + " layers (SGLang's make_layers asserts "
                           "num_hidden_layers >= pp_size)");
  }
  // distributed/utils.py get_pp_indices: the partition is ignored with pp_size 1
  if (!partition.empty() && pp > 1) {
    return ExplicitPipelineLayers(num_layers, pp, partition, "SGLANG_PP_LAYER_PARTITION");
  }
  // distributed/utils.py get_pp_indices: "the last N partitions will have one extra layer, where
  // N = remainder"
  std::vector<int64_t> layers(static_cast<size_t>(pp), num_layers / pp);
  const int64_t remainder = num_layers % pp;
  for (int64_t r = pp - remainder; r < pp; ++r) ++layers[static_cast<size_t>(r)];
  return layers;
}

SglangStageModules SglangModulesOnStage(const ModelConfig& c, int stage, int pp) {
  const bool first = stage == 0, last = stage == pp - 1;
  // Every class builds embed_tokens on the first PP rank and norm on the last (PPMissingLayer
  // elsewhere): models/llama.py LlamaModel, qwen2.py Qwen2Model (Qwen3Model extends it),
  // qwen2_moe.py Qwen2MoeModel (Qwen3MoeModel), deepseek_v2.py DeepseekV2Model (the last rank too
  // only with speculative decoding, which ferry does not model).
  SglangStageModules holds{first, last, false};
  const bool shared = pp == 1 && c.tie_embeddings;  // lm_head = model.embed_tokens
  switch (c.family) {
    case ModelFamily::kLlama:
      if (c.qk_norm || c.qkv_bias) {
        // models/qwen2.py, qwen3.py: lm_head on the last rank, tied only with pp 1; with more
        // the last rank's own is loaded from model.embed_tokens.weight
        holds.lm_head = last && !shared;
      } else {
        // models/llama.py (mistral.py extends it): ParallelLMHead on every rank, loaded there;
        // tied, lm_head is embed_tokens, a PPMissingLayer past the first rank
        holds.lm_head = !c.tie_embeddings;
      }
      break;
    case ModelFamily::kQwen3Moe:
      // models/qwen3_moe.py Qwen3MoeForCausalLM: ParallelLMHead on every rank, never tied
      holds.lm_head = true;
      break;
    case ModelFamily::kDeepseekV3:
      // models/deepseek_v2.py DeepseekV2ForCausalLM: on the last rank, tied only with pp 1
      holds.lm_head = last && !shared;
      break;
    case ModelFamily::kNemotronH:
      break;  // not modelled: ResolveSglang refuses it
  }
  return holds;
}

}  // namespace ferry::models
