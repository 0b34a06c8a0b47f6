// Megatron's pipeline ranks and model chunks of a hybrid model
// (tools/models/hybrid_pipeline_stages.h).
#include "tools/models/hybrid_pipeline_stages.h"

#include <algorithm>
#include <vector>

#include "core/base/strings.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

Status Rejects(const std::string& why) { return InvalidArgument("Megatron rejects it: " + why); }

// The pattern Megatron is given, checked against the model's: the same layers once '|' is removed.
Result<std::string> GivenPattern(const std::string& model_pattern, const std::string& given) {
  if (given.empty()) return model_pattern;
  // megatron/core/models/hybrid/hybrid_layer_allocation.py: "<main>/<mtp>/<mtp>..." gives MTP
  // depths of the MTP pattern's layers. vLLM's counterpart,
  // vllm/model_executor/models/nemotron_h_mtp.py NemotronHMultiTokenPredictor, builds one depth
  // of attention ('*') and MoE ('E') layers only; ferry's hybrid presets carry no MTP layers and
  // it models no 'E' layer, so there is nothing to lay out.
  if (given.find('/') != std::string::npos) {
    return InvalidArgument("pattern=" + given + ": '/' starts multi-token prediction layers, which "
                           "ferry models for GPT models only (mtp=): its hybrid models carry no "
                           "MTP layers (vLLM's NemotronHMTP, nemotron_h_mtp.py, serves one MTP "
                           "depth of '*' and 'E' layers only)");
  }
  std::string layers = given;
  layers.erase(std::remove(layers.begin(), layers.end(), '|'), layers.end());
  if (layers != model_pattern) {
    return InvalidArgument("pattern=" + given + " is not the model's hybrid layer pattern '" +
                           model_pattern + "' with '|' stage boundaries added");
  }
  return given;
}

// The GPT pipeline arguments Megatron refuses next to --hybrid-layer-pattern.
// megatron/training/arguments.py validate_args (the hybrid_layer_pattern block)
Status CheckHybridArgs(const MegatronPipelineArgs& a, bool has_pipes) {
  if (has_pipes && a.first > 0) {
    return Rejects("If --hybrid-layer-pattern contains pipe separators, "
                   "--decoder-first-pipeline-num-layers (first) should not be specified as the "
                   "pipeline layout is explicitly defined.");
  }
  if (has_pipes && a.last > 0) {
    return Rejects("If --hybrid-layer-pattern contains pipe separators, "
                   "--decoder-last-pipeline-num-layers (last) should not be specified as the "
                   "pipeline layout is explicitly defined.");
  }
  if (a.vstage_layers > 0) {
    return Rejects("--num-layers-per-virtual-pipeline-stage (vstage_layers) should not be used "
                   "with --hybrid-layer-pattern. To specify virtual pipelining, describe a number "
                   "of pipeline segments in --hybrid-layer-pattern (pattern=) that is a multiple "
                   "of --pipeline-model-parallel-size greater than 1");
  }
  if (a.vstages > 0) {
    return Rejects("--num-virtual-stages-per-pipeline-rank (vstages) should not be used with "
                   "--hybrid-layer-pattern. Virtual pipeline stages are derived from the number "
                   "of | segments in the pattern (pattern=).");
  }
  if (!a.layout.empty()) {
    return Rejects("--pipeline-model-parallel-layout (layout) should not be used with "
                   "--hybrid-layer-pattern. Pipeline stage layout is defined by | separators in "
                   "the pattern (pattern=).");
  }
  return Status::Ok();
}

// Segment i is chunk i / pp of rank i % pp; its layers count from 0 (HybridStack.layers).
// megatron/core/models/hybrid/hybrid_layer_allocation.py select_pipeline_segment
MegatronPipeline FromSegments(const std::vector<std::string>& segments, int pp) {
  MegatronPipeline out;
  out.vpp = static_cast<int>(segments.size()) / pp;
  for (size_t i = 0; i < segments.size(); ++i) {
    const int rank = static_cast<int>(i) % pp, chunk = static_cast<int>(i) / pp;
    for (size_t j = 0; j < segments[i].size(); ++j) {
      out.layers.push_back({rank, chunk, static_cast<int>(j)});
    }
  }
  return out;
}

}  // namespace

Result<MegatronPipeline> MegatronHybridPipelineOf(const std::string& model_pattern,
                                                  const MegatronPipelineArgs& a) {
  if (a.pp < 1 || model_pattern.empty()) {
    return InvalidArgument("a hybrid pipeline needs pp >= 1 and a non-empty layer pattern");
  }
  FERRY_ASSIGN_OR_RETURN(const std::string pattern, GivenPattern(model_pattern, a.hybrid_pattern));
  const std::vector<std::string> segments = Split(pattern, '|');
  FERRY_RETURN_IF_ERROR(CheckHybridArgs(a, segments.size() > 1));
  const int64_t layers = static_cast<int64_t>(model_pattern.size());
  if (segments.size() == 1) {
    if (a.first == 0 && a.last == 0 && layers % a.pp != 0) {
      return Rejects("Number of layers (" + Num(layers) + ") must be evenly divisible by "
                     "pipeline-model-parallel-size (" + Num(a.pp) + ") when no pipe separators "
                     "are specified in the pattern; add '|' stage boundaries (pattern=) or give "
                     "first=N,last=M");
    }
    // the uneven split of megatron/core/transformer/transformer_config.py __post_init__, as for GPT
    return MegatronPipelineOf(layers, {a.pp, a.first, a.last, 0, 0, "", ""});
  }
  const int64_t count = static_cast<int64_t>(segments.size());
  if (count % a.pp != 0) {
    return Rejects("The number of hybrid pipeline segments described by --hybrid-layer-pattern "
                   "must be evenly divisible by --pipeline-model-parallel-size. Got " +
                   Num(count) + " segments and " + Num(a.pp) + " pipeline parallel size.");
  }
  // megatron/training/arguments.py: the interleaved schedule needs more than one pipeline rank
  if (a.pp == 1) {
    return Rejects("When interleaved schedule is used, pipeline-model-parallel size should be "
                   "greater than 1 (" + Num(count) + " pattern segments on pp=1)");
  }
  return FromSegments(segments, a.pp);
}

}  // namespace ferry::models
