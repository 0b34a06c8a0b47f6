// SGLang's pipeline parallelism (SGLang 0.5.23, python/sglang/srt, the paths below relative to
// it): which decoder layers each PP rank of a server builds, and which PP ranks build the
// embedding, the final norm and the output layer, by model class. Those classes differ: Llama
// and Qwen3-MoE build lm_head on every PP rank, Qwen2, Qwen3 and DeepSeek on the last only.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

// Layers per PP rank, as distributed/utils.py get_pp_indices splits `num_layers` over `pp` ranks:
// an explicit `partition` (SGLANG_PP_LAYER_PARTITION, one count per rank; empty: not given) is
// checked as vLLM's is (ExplicitPipelineLayers); without it each rank gets num_layers / pp and the
// remainder r goes one each to the last r ranks (pp-r .. pp-1), where vLLM gives it to the r
// ranks before the last. utils/common.py make_layers asserts num_layers >= pp.
Result<std::vector<int64_t>> SglangPipelineLayers(int64_t num_layers, int pp,
                                                  const std::vector<int>& partition);

// The model-level modules PP rank `stage` of `pp` builds and loads.
struct SglangStageModules {
  bool embed_tokens = false;
  bool norm = false;
  // A ParallelLMHead of its own, loaded from lm_head.weight, or with tied embeddings from
  // model.embed_tokens.weight (Qwen2 and Qwen3 with pp > 1). Without one, a tied model's lm_head
  // is its embed_tokens.
  bool lm_head = false;
};
SglangStageModules SglangModulesOnStage(const ModelConfig& c, int stage, int pp);

}  // namespace ferry::models
