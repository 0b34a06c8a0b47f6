// vLLM's pipeline parallelism: which decoder layers each PP rank of an engine builds, with the
// checks vLLM makes on an explicit partition (VLLM_PP_LAYER_PARTITION), and which PP ranks build
// the embedding, the final norm and the output layer of each model family ferry's presets cover.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

// Layers per PP rank, as vllm/distributed/utils.py get_pp_indices splits `num_layers` over `pp`
// ranks: an explicit `partition` (VLLM_PP_LAYER_PARTITION, one count per rank; empty: not given)
// must have pp entries summing to num_layers, or vLLM's ValueError is returned; without it every
// rank gets num_layers / pp and the remainder r goes one each to the r ranks before the last
// (ranks pp-1-r .. pp-2). Negative counts, which vLLM does not check but cannot build, are
// rejected.
Result<std::vector<int64_t>> VllmPipelineLayers(int64_t num_layers, int pp,
                                                const std::vector<int>& partition);

// Parses a spec's "partition=a.b.c" (VLLM_PP_LAYER_PARTITION "a,b,c": the spec separates keys
// with commas): non-negative integers separated by '.'.
Result<std::vector<int>> ParseVllmPartition(const std::string& text);

// The partition as a spec writes it ("3.2").
std::string VllmPartitionText(const std::vector<int>& partition);

// The MoE layers of model `c` on each PP rank whose decoder layers `stage_layers` counts
// (VllmPipelineLayers): each rank's EplbState rows, and the MoE blocks it builds.
std::vector<int64_t> VllmStageMoeLayers(const ModelConfig& c, const std::vector<int64_t>& stage_layers);

// The model-level modules PP rank `stage` of `pp` builds for model `c`.
struct VllmStageModules {
  bool embed_tokens = false;
  bool norm = false;
  bool lm_head = false;  // an lm_head of its own; with tied embeddings it is embed_tokens
};
VllmStageModules VllmModulesOnStage(const ModelConfig& c, int stage, int pp);

}  // namespace ferry::models
