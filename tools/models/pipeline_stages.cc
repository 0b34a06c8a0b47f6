// Megatron's pipeline stages (tools/models/pipeline_stages.h).
#include "tools/models/pipeline_stages.h"

#include <string>

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

// Layers of each stage: first, then `middle` stages of `per_middle`, then last (0: not given).
std::vector<int> Assign(int64_t num_layers, int pp, int first, int last, int64_t per_middle) {
  std::vector<int> stage_of(static_cast<size_t>(num_layers));
  int64_t layer = 0;
  for (int s = 0; s < pp; ++s) {
    int64_t count = per_middle;
    if (s == 0 && first > 0) count = first;
    if (s == pp - 1 && last > 0) count = last;
    for (int64_t i = 0; i < count; ++i) stage_of[static_cast<size_t>(layer++)] = s;
  }
  return stage_of;
}

}  // namespace

Result<std::vector<int>> MegatronStageOfLayer(int64_t num_layers, int pp, int first, int last) {
  if (pp < 1 || num_layers < 1 || first < 0 || last < 0) {
    return InvalidArgument("layers, pp, first and last must be positive");
  }
  if (first == 0 && last == 0) {
    // megatron/core/transformer/transformer_block.py get_num_layers_to_build (even split)
    if (num_layers % pp != 0) {
      return InvalidArgument("Megatron rejects num_layers=" + Num(num_layers) +
                             ": it should be divisible by pipeline_model_parallel_size=" +
                             Num(pp) + "; give the first and last stages their own layer counts "
                             "with first=N,last=M (--decoder-first-pipeline-num-layers, "
                             "--decoder-last-pipeline-num-layers)");
    }
    return Assign(num_layers, pp, 0, 0, num_layers / pp);
  }
  if (pp == 1 && first > 0 && last > 0) {
    return InvalidArgument("first and last both name the only pipeline stage (pp=1)");
  }
  // megatron/core/transformer/transformer_config.py __post_init__ (uneven PP checks)
  const int64_t middle_layers = num_layers - first - last;
  const int middle_stages = pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
  if (middle_layers < 0) {
    return InvalidArgument("first=" + Num(first) + " and last=" + Num(last) + " exceed the " +
                           Num(num_layers) + " layers");
  }
  if ((middle_layers != 0) != (middle_stages != 0)) {
    return InvalidArgument("Megatron rejects it: Mismatch: " + Num(middle_layers) +
                           " middle layers remaining but " + Num(middle_stages) +
                           " middle PP stages available.");
  }
  if (middle_stages > 0 && middle_layers % middle_stages != 0) {
    return InvalidArgument("Megatron rejects it: number of layers at middle stage: " +
                           Num(middle_layers) +
                           " must be divisible by the middle pipeline model parallel size " +
                           Num(middle_stages));
  }
  return Assign(num_layers, pp, first, last, middle_stages > 0 ? middle_layers / middle_stages : 0);
}

}  // namespace ferry::models
