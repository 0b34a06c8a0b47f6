// Megatron's assignment of decoder layers to pipeline ranks and, with interleaving, to the model
// chunks (virtual stages) of each rank, with the checks Megatron makes. Four ways, as Megatron's
// arguments give them:
//  - an even split (num_layers divisible by pp);
//  - the first and/or last rank given its own layer count (--decoder-first-pipeline-num-layers /
//    --decoder-last-pipeline-num-layers, in a spec `first=N,last=M`), the rest split evenly over
//    the middle ranks;
//  - either of those interleaved over `vstages` model chunks per rank
//    (--num-virtual-stages-per-pipeline-rank) or chunks of `vstage_layers` layers
//    (--num-layers-per-virtual-pipeline-stage): each rank's layers divide evenly over its chunks,
//    and the layers run chunk 0 of every rank, then chunk 1 of every rank, ...;
//  - an explicit layout string (--pipeline-model-parallel-layout, tools/models/pipeline_layout.h).
// A configuration Megatron rejects is rejected here with Megatron's reason; nothing is
// reinterpreted.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// Megatron's pipeline arguments; 0 / empty: not given (Megatron's None).
struct MegatronPipelineArgs {
  int pp = 1;
  int first = 0, last = 0;
  int vstages = 0;
  int vstage_layers = 0;
  std::string layout;
  // A hybrid model's --hybrid-layer-pattern with '|' stage boundaries
  // (tools/models/hybrid_pipeline_stages.h); empty for GPT models and for an unsplit pattern.
  std::string hybrid_pattern;
  // --mtp-num-layers (0: none). Without a layout string the MTP block is on the last virtual stage
  // of the last pipeline rank; with one, where its 'm's are.
  int mtp_layers = 0;
};

// Where one decoder layer lives: pipeline rank, model chunk (virtual stage) of that rank, and its
// number among the chunk's layers (the `decoder.layers.<local>` of the chunk's parameters).
struct LayerPlace {
  int pp_rank = 0;
  int vstage = 0;
  int local = 0;
};

struct MegatronPipeline {
  int vpp = 1;                     // model chunks per pipeline rank
  std::vector<LayerPlace> layers;  // one per decoder layer, in layer order
  // Where the MTP block (every MTP layer, `mtp.layers.<i>`) lives; pp_rank -1 without MTP layers.
  // megatron/core/transformer/multi_token_prediction.py mtp_on_this_rank,
  // get_mtp_num_layers_to_build
  LayerPlace mtp{-1, 0, 0};
};

// The placement of `num_layers` decoder layers and args.mtp_layers MTP layers under `args`, or
// Megatron's reason for rejecting it.
Result<MegatronPipeline> MegatronPipelineOf(int64_t num_layers, const MegatronPipelineArgs& args);

}  // namespace ferry::models
