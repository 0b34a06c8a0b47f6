// Megatron's assignment of a hybrid (Mamba) model's layers to pipeline ranks and model chunks.
// Megatron's HybridModel splits its --hybrid-layer-pattern, not the GPT pipeline arguments:
//  - a pattern with '|' separators: each '|'-delimited segment is one model chunk, segment i
//    being chunk i / pp of pipeline rank i % pp (the segment count a multiple of pp; more segments
//    than pp ranks is the interleaved schedule, with segments / pp chunks a rank);
//  - a pattern without '|' on pp > 1 ranks (deprecated in Megatron, still accepted): an even split,
//    or first/last stage layer counts with the middle split evenly, exactly as for GPT models;
//  - vstages, vstage_layers and a --pipeline-model-parallel-layout string are rejected, and so are
//    first/last with a '|' pattern.
// Follows megatron/core/models/hybrid/hybrid_layer_allocation.py select_pipeline_segment and the
// hybrid checks of megatron/training/arguments.py validate_args; a configuration Megatron rejects
// is rejected with Megatron's reason.
//
// Pure function; thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "tools/models/pipeline_stages.h"

namespace ferry::models {

// The placement of the layers of a hybrid model whose layer pattern is `model_pattern` (one
// character a layer, no '|'), under `args`; args.hybrid_pattern is Megatron's
// --hybrid-layer-pattern with its '|' stage boundaries (empty: the model's pattern as is), and
// must be the model's pattern once its '|' are removed.
Result<MegatronPipeline> MegatronHybridPipelineOf(const std::string& model_pattern,
                                                  const MegatronPipelineArgs& args);

}  // namespace ferry::models
