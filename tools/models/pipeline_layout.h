// Megatron's explicit pipeline layout string (--pipeline-model-parallel-layout, e.g.
// "Et*3|(tt|)*29,m|L"): parsing it into stages and the checks Megatron makes on it, with Megatron's
// messages. Follows megatron/core/transformer/pipeline_parallel_layer_layout.py
// (PipelineParallelLayerLayout.parse_str_to_list, __init__, validate_layer_layout).
//
// Stages are split by '|'; "(...)*n" and "x*n" repeat; commas are cosmetic. Symbols: E embedding,
// t decoder layer, m MTP layer, L loss (the output layer). The i-th stage of the string is model
// chunk (virtual stage) i / pp of pipeline rank i % pp.
//
// Pure functions; thread-safe. The string is untrusted: its expansion is bounded
// (kMaxPipelineLayoutChars) before anything is repeated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// Most symbols a layout string may expand to.
inline constexpr int64_t kMaxPipelineLayoutChars = int64_t{1} << 20;

// The stages of `text` in string order, each the symbols ('E', 't', 'm', 'L') it holds.
Result<std::vector<std::string>> ParseMegatronPipelineLayout(const std::string& text);

// What a layout string places, stage by stage (string order: stage v * pp + p is virtual stage v
// of pipeline rank p).
struct MegatronLayoutCounts {
  std::vector<int> decoders;  // decoder layers ('t') of each stage
  int mtp_stage = -1;         // the stage holding every MTP layer ('m'); -1 when there are none
};

// The stages of `text` after Megatron's checks for a model of `num_layers` decoder layers and
// `mtp_layers` MTP layers (--mtp-num-layers, 0 for none): the stage count divides by pp, E first
// and L last, each once, exactly num_layers t's and mtp_layers m's, every m after every t, all of
// them in one stage, that the last virtual stage of its pipeline rank.
Result<MegatronLayoutCounts> MegatronLayoutLayerCounts(const std::string& text, int pp,
                                                       int64_t num_layers, int64_t mtp_layers);

}  // namespace ferry::models
