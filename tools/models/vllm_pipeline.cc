// vLLM's split of a model over PP ranks (tools/models/vllm_pipeline.h).
#include "tools/models/vllm_pipeline.h"

#include <cstdlib>

#include "core/base/strings.h"

namespace ferry::models {

Result<std::vector<int64_t>> ExplicitPipelineLayers(int64_t num_layers, int pp,
                                                    const std::vector<int>& partition,
                                                    const std::string& variable) {
  // vllm/distributed/utils.py get_pp_indices (python/sglang/srt/distributed/utils.py alike): the
  // partition's checks and messages
  const std::string given = variable + " (partition=" + PipelinePartitionText(partition) + ")";
  if (partition.size() != static_cast<size_t>(pp)) {
    return InvalidArgument(given + ": len(partitions)=" + std::to_string(partition.size()) +
                           " does not match pp_size=" + std::to_string(pp) + ".");
  }
  std::vector<int64_t> layers;
  int64_t sum = 0;
  for (int n : partition) {
    if (n < 0) {
      return InvalidArgument("partition=" + PipelinePartitionText(partition) + ": a negative "
                             "layer count, which make_layers cannot build");
    }
    sum += n;
    layers.push_back(n);
  }
  if (sum != num_layers) {
    return InvalidArgument(given + ": sum(partitions)=" + std::to_string(sum) +
                           " does not match num_hidden_layers=" + std::to_string(num_layers) +
                           ".");
  }
  return layers;
}

Result<std::vector<int64_t>> VllmPipelineLayers(int64_t num_layers, int pp,
                                                const std::vector<int>& partition) {
  if (pp < 1) return InvalidArgument("pp " + std::to_string(pp) + " is not positive");
  if (!partition.empty()) {
    return ExplicitPipelineLayers(num_layers, pp, partition, "VLLM_PP_LAYER_PARTITION");
  }
  // vllm/distributed/utils.py get_pp_indices: num_layers / pp each, the remainder one each to
  // partitions[-2], partitions[-3], ... (never the last)
  std::vector<int64_t> layers(static_cast<size_t>(pp), num_layers / pp);
  const int64_t remaining = num_layers % pp;
  for (int64_t i = 2; i < remaining + 2; ++i) ++layers[static_cast<size_t>(pp - i)];
  return layers;
}

Result<std::vector<int>> ParsePipelinePartition(const std::string& text,
                                                const std::string& variable) {
  std::vector<int> out;
  for (const std::string& piece : Split(text, '.')) {
    const std::string n = Trim(piece);
    char* end = nullptr;
    const long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || end != n.c_str() + n.size() || v < 0 || v > (1 << 20)) {
      return InvalidArgument("bad value '" + text + "' for partition: expected the layers of each "
                             "PP rank as non-negative integers separated by '.', e.g. 3.2 (" +
                             variable + "=3,2)");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

std::string PipelinePartitionText(const std::vector<int>& partition) {
  std::string s;
  for (size_t i = 0; i < partition.size(); ++i) s += (i ? "." : "") + std::to_string(partition[i]);
  return s;
}

std::vector<int64_t> VllmStageMoeLayers(const ModelConfig& c, const std::vector<int64_t>& stage_layers) {
  std::vector<int64_t> moe(stage_layers.size(), 0);
  int64_t layer = 0;
  for (size_t s = 0; s < stage_layers.size(); ++s) {
    for (const int64_t end = layer + stage_layers[s]; layer < end; ++layer) {
      moe[s] += c.IsMoeLayer(layer) ? 1 : 0;
    }
  }
  return moe;
}

VllmStageModules VllmModulesOnStage(const ModelConfig& c, int stage, int pp) {
  const bool first = stage == 0, last = stage == pp - 1;
  switch (c.family) {
    case ModelFamily::kLlama:
      // vllm/model_executor/models/llama.py (qwen2.py, qwen3.py alike): embed_tokens on the first
      // rank, and on the last when tied (lm_head.tie_weights); norm and lm_head on the last
      return {first || (c.tie_embeddings && last), last, last && !c.tie_embeddings};
    case ModelFamily::kDeepseekV3:
      // vllm/model_executor/models/deepseek_v2.py: embed_tokens first, norm and lm_head last
      return {first, last, last && !c.tie_embeddings};
    case ModelFamily::kQwen3Moe:
    case ModelFamily::kNemotronH:
      // vllm/model_executor/models/qwen3_moe.py, nemotron_h.py: embed_tokens, norm (norm_f) and
      // lm_head built unconditionally, so on every PP rank, and loaded there (AutoWeightsLoader)
      return {true, true, !c.tie_embeddings};
  }
  return {true, true, !c.tie_embeddings};
}

}  // namespace ferry::models
