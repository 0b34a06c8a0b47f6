// Megatron's assignment of decoder layers to pipeline stages, with the checks Megatron makes: an
// even split (num_layers divisible by pp), or the first and/or last stage given its own layer
// count (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, in a spec
// `first=N,last=M`) and the layers left split evenly over the middle stages. A configuration
// Megatron rejects is rejected here with Megatron's reason; nothing is reinterpreted.
//
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// stage_of[layer] for num_layers layers over pp stages. first / last: layers of the first / last
// stage, 0 when not given (Megatron's None).
Result<std::vector<int>> MegatronStageOfLayer(int64_t num_layers, int pp, int first, int last);

}  // namespace ferry::models
