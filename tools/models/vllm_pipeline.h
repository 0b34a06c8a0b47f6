// vLLM's pipeline parallelism: which decoder layers each PP rank of an engine builds, with the
// checks vLLM makes on an explicit partition (VLLM_PP_LAYER_PARTITION), and which PP ranks build
// the embedding, the final norm and the output layer of each model family ferry's presets cover.
// SGLang's get_pp_indices makes the same checks on its SGLANG_PP_LAYER_PARTITION
// (tools/models/sglang_pipeline.h), so the partition's parsing and checks name the variable.
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
// is checked by ExplicitPipelineLayers; without it every rank gets num_layers / pp and the
// remainder r goes one each to the r ranks before the last (ranks pp-1-r .. pp-2).
Result<std::vector<int64_t>> VllmPipelineLayers(int64_t num_layers, int pp,
                                                const std::vector<int>& partition);

// An explicit partition's layers per PP rank, `variable` being the environment variable that
// gives it (VLLM_PP_LAYER_PARTITION, SGLANG_PP_LAYER_PARTITION): it must have pp entries summing
// to num_layers, or get_pp_indices' ValueError is returned naming `variable`. Negative counts,
// which neither engine checks but make_layers cannot build, are rejected.
Result<std::vector<int64_t>> ExplicitPipelineLayers(int64_t num_layers, int pp,
                                                    const std::vector<int>& partition,
                                                    const std::string& variable);

// Parses a spec's "partition=a.b.c" (`variable`="a,b,c": the spec separates keys with commas):
// non-negative integers separated by '.'.
Result<std::vector<int>> ParsePipelinePartition(const std::string& text,
                                                const std::string& variable);

// The partition as a spec writes it ("3.2").
std::string PipelinePartitionText(const std::vector<int>& partition);

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
