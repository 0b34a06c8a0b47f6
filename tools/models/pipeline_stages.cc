// Megatron's pipeline ranks and model chunks (tools/models/pipeline_stages.h).
#include "tools/models/pipeline_stages.h"

#include "tools/models/pipeline_layout.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

Status Rejects(const std::string& why) { return InvalidArgument("Megatron rejects it: " + why); }

// Model chunks per rank from the virtual-stage arguments (the layout string's count is checked
// with the string); 1 when none is given.
// megatron/training/arguments.py validate_args ("Uneven virtual pipeline parallelism")
Result<int> VirtualStages(int64_t num_layers, const MegatronPipelineArgs& a) {
  const int given = (a.vstages > 0) + (a.vstage_layers > 0) + !a.layout.empty();
  if (given > 1) {
    return Rejects("No more than one of the following arguments can be set at the same time: "
                   "--num-layers-per-virtual-pipeline-stage (vstage_layers), "
                   "--num-virtual-stages-per-pipeline-rank (vstages), "
                   "--pipeline-model-parallel-layout (layout)");
  }
  // megatron/core/transformer/transformer_config.py __post_init__ ("PP layout")
  if (!a.layout.empty() && (a.first > 0 || a.last > 0)) {
    return Rejects("pipeline_model_parallel_layout cannot be set with other pipeline layout "
                   "arguments (first=" + Num(a.first) + ", last=" + Num(a.last) + ")");
  }
  if (a.vstages > 0) return a.vstages;
  if (a.vstage_layers == 0) return 1;
  if (a.first > 0 || a.last > 0) {
    return Rejects("please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
                   "parallel degree when enable uneven pipeline parallelism");
  }
  if (num_layers % a.pp != 0) {
    return Rejects("number of layers of the model must be divisible pipeline model parallel size");
  }
  if ((num_layers / a.pp) % a.vstage_layers != 0) {
    return Rejects("number of layers per pipeline stage must be divisible number of layers per "
                   "virtual pipeline stage");
  }
  return static_cast<int>(num_layers / a.pp / a.vstage_layers);
}

// Layers of each pipeline rank without a layout string: even, or first/last and even middles.
// megatron/core/transformer/transformer_block.py get_num_layers_to_build and the uneven-PP checks
// of megatron/core/transformer/transformer_config.py __post_init__
Result<std::vector<int64_t>> RankLayers(int64_t num_layers, const MegatronPipelineArgs& a) {
  const int pp = a.pp;
  if (a.first == 0 && a.last == 0) {
    if (num_layers % pp != 0) {
      return InvalidArgument("Megatron rejects num_layers=" + Num(num_layers) +
                             ": it should be divisible by pipeline_model_parallel_size=" +
                             Num(pp) + "; give the first and last stages their own layer counts "
                             "with first=N,last=M (--decoder-first-pipeline-num-layers, "
                             "--decoder-last-pipeline-num-layers)");
    }
    return std::vector<int64_t>(static_cast<size_t>(pp), num_layers / pp);
  }
  if (pp == 1 && a.first > 0 && a.last > 0) {
    return InvalidArgument("first and last both name the only pipeline stage (pp=1)");
  }
  const int64_t middle_layers = num_layers - a.first - a.last;
  const int middle_stages = pp - (a.first > 0 ? 1 : 0) - (a.last > 0 ? 1 : 0);
  if (middle_layers < 0) {
    return InvalidArgument("first=" + Num(a.first) + " and last=" + Num(a.last) + " exceed the " +
                           Num(num_layers) + " layers");
  }
  if ((middle_layers != 0) != (middle_stages != 0)) {
    return Rejects("Mismatch: " + Num(middle_layers) + " middle layers remaining but " +
                   Num(middle_stages) + " middle PP stages available.");
  }
  if (middle_stages > 0 && middle_layers % middle_stages != 0) {
    return Rejects("number of layers at middle stage: " + Num(middle_layers) +
                   " must be divisible by the middle pipeline model parallel size " +
                   Num(middle_stages));
  }
  std::vector<int64_t> layers(static_cast<size_t>(pp),
                              middle_stages > 0 ? middle_layers / middle_stages : 0);
  if (a.first > 0) layers.front() = a.first;
  if (a.last > 0) layers.back() = a.last;
  return layers;
}

// Each rank's layers split evenly over its vpp chunks, in chunk order (chunk v of rank p at
// v * pp + p), with Megatron's divisibility messages.
Result<std::vector<int>> ChunkLayers(const std::vector<int64_t>& rank_layers,
                                     const MegatronPipelineArgs& a, int vpp) {
  const int pp = a.pp;
  std::vector<int> counts(static_cast<size_t>(pp) * vpp);
  for (int p = 0; p < pp; ++p) {
    const int64_t n = rank_layers[static_cast<size_t>(p)];
    if (n % vpp != 0) {
      // transformer_config.py names the first and last stages; transformer_block.py the others
      const bool first = p == 0 && a.first > 0, last = p == pp - 1 && a.last > 0;
      const std::string what = first ? "number of layers at first stage: "
                               : last ? "number of layers at last stage: "
                               : (a.first > 0 || a.last > 0)
                                   ? "number of layers on each middle pipeline rank: "
                                   : "num_layers_per_pipeline_rank ";
      return Rejects(what + Num(n) + " must be divisible by virtual pipeline parallel degree " +
                     Num(vpp));
    }
    for (int v = 0; v < vpp; ++v) counts[static_cast<size_t>(v) * pp + p] = static_cast<int>(n / vpp);
  }
  return counts;
}

}  // namespace

Result<MegatronPipeline> MegatronPipelineOf(int64_t num_layers, const MegatronPipelineArgs& a) {
  if (a.pp < 1 || num_layers < 1 || a.first < 0 || a.last < 0 || a.vstages < 0 ||
      a.vstage_layers < 0) {
    return InvalidArgument("layers, pp, first, last, vstages and vstage_layers must be positive");
  }
  FERRY_ASSIGN_OR_RETURN(int vpp, VirtualStages(num_layers, a));
  if (a.mtp_layers < 0) return InvalidArgument("mtp must not be negative");
  std::vector<int> counts;
  MegatronPipeline out;
  if (!a.layout.empty()) {
    FERRY_ASSIGN_OR_RETURN(const MegatronLayoutCounts laid,
                           MegatronLayoutLayerCounts(a.layout, a.pp, num_layers, a.mtp_layers));
    counts = laid.decoders;
    vpp = static_cast<int>(counts.size() / static_cast<size_t>(a.pp));
    if (laid.mtp_stage >= 0) out.mtp = {laid.mtp_stage % a.pp, laid.mtp_stage / a.pp, 0};
  } else {
    FERRY_ASSIGN_OR_RETURN(const std::vector<int64_t> rank_layers, RankLayers(num_layers, a));
    FERRY_ASSIGN_OR_RETURN(counts, ChunkLayers(rank_layers, a, vpp));
    // megatron/core/transformer/multi_token_prediction.py mtp_on_this_rank: without a layout, the
    // last pipeline stage; MultiTokenPredictionBlock: its last virtual stage
    if (a.mtp_layers > 0) out.mtp = {a.pp - 1, vpp - 1, 0};
  }
  // megatron/training/arguments.py: the interleaved schedule needs more than one pipeline rank
  if (vpp > 1 && a.pp == 1) {
    return Rejects("When interleaved schedule is used, pipeline-model-parallel size should be "
                   "greater than 1 (" + Num(vpp) + " model chunks on pp=1)");
  }
  // megatron/core/transformer/transformer_layer.py get_transformer_layer_offset: chunk v of rank p
  // starts after every chunk before v on all ranks and chunk v of ranks before p
  out.vpp = vpp;
  out.layers.reserve(static_cast<size_t>(num_layers));
  for (int v = 0; v < vpp; ++v) {
    for (int p = 0; p < a.pp; ++p) {
      for (int i = 0; i < counts[static_cast<size_t>(v) * a.pp + p]; ++i) {
        out.layers.push_back({p, v, i});
      }
    }
  }
  return out;
}

}  // namespace ferry::models
