// Framework layouts of a model preset (tools/models/framework_layouts.h): a spec resolved and
// handed to the Megatron, vLLM or SGLang writer, and the two layouts and topology of a refit.
#include "tools/models/framework_layouts.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/layout/limits.h"
#include "tools/models/megatron_layout.h"
#include "tools/models/sglang_layout.h"
#include "tools/models/vllm_layout.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

Result<Layout> BuildFrameworkLayout(const ModelPreset& preset, const FrameworkSpec& spec,
                                    int first_rank) {
  if (first_rank < 0) return InvalidArgument("first rank " + Num(first_rank) + " is negative");
  FERRY_ASSIGN_OR_RETURN(FrameworkSpec resolved, ResolveFrameworkSpec(spec, preset.config()));
  // Checked before any buffer is made: a layout past kMaxRanks would be refused only after
  // building per-rank tables of that size.
  const int64_t last_rank = int64_t{first_rank} + NumRanks(resolved) - 1;
  if (last_rank >= kMaxRanks) {
    return InvalidArgument("first rank " + Num(first_rank) + " puts the " +
                           Num(NumRanks(resolved)) + " ranks of " + resolved.ToString() +
                           " at ranks up to " + Num(last_rank) + ", over the limit of " +
                           Num(kMaxRanks) + " ranks (kMaxRanks): the first rank is at most " +
                           Num(kMaxRanks - NumRanks(resolved)));
  }
  // The MTP layers the spec holds join the preset's tensors when it lacks them.
  const ModelPreset* model = &preset;
  ModelPreset with_mtp;
  if (MtpLayers(resolved) > preset.config().mtp_layers) {
    FERRY_ASSIGN_OR_RETURN(with_mtp, WithMtpLayers(preset, MtpLayers(resolved)));
    model = &with_mtp;
  }
  Layout layout;
  layout.tensors.reserve(model->tensors().size());
  Status st =
      resolved.kind == FrameworkSpec::Kind::kMegatron
          ? BuildMegatronLayout(*model, resolved.megatron, resolved.stack_expert_tensors,
                                first_rank, layout)
      : resolved.kind == FrameworkSpec::Kind::kVllm
          ? BuildVllmLayout(*model, resolved.vllm, resolved.stack_expert_tensors, first_rank, layout)
          : BuildSglangLayout(*model, resolved.sglang, resolved.stack_expert_tensors, first_rank,
                              layout);
  if (!st.ok()) return st.WithContext("building " + resolved.ToString() + " layout");
  return Result<Layout>(std::move(layout));
}

Result<RefitLayouts> BuildRefitLayouts(const ModelPreset& preset, const FrameworkSpec& source,
                                       const FrameworkSpec& destination,
                                       const RefitOptions& options) {
  if (options.gpus_per_node < 1) {
    return InvalidArgument("gpus_per_node must be positive, got " + Num(options.gpus_per_node));
  }
  RefitLayouts out;
  FERRY_ASSIGN_OR_RETURN(out.source_spec, ResolveFrameworkSpec(source, preset.config()));
  FERRY_ASSIGN_OR_RETURN(out.destination_spec, ResolveFrameworkSpec(destination, preset.config()));
  if (MtpLayers(out.destination_spec) > MtpLayers(out.source_spec)) {
    return InvalidArgument("the destination holds " + Num(MtpLayers(out.destination_spec)) +
                           " MTP layer(s) and the source " + Num(MtpLayers(out.source_spec)) +
                           ": no source for them; give the source mtp=" +
                           Num(MtpLayers(out.destination_spec)));
  }
  const int m = NumRanks(out.source_spec);
  const int n = NumRanks(out.destination_spec);
  out.destination_first_rank = options.colocated ? 0 : m;
  FERRY_ASSIGN_OR_RETURN(out.source, BuildFrameworkLayout(preset, out.source_spec, 0));
  FERRY_ASSIGN_OR_RETURN(out.destination,
                         BuildFrameworkLayout(preset, out.destination_spec, out.destination_first_rank));
  out.topology = Topology::Uniform(std::max(m, out.destination_first_rank + n), options.gpus_per_node);
  return Result<RefitLayouts>(std::move(out));
}

}  // namespace ferry::models
