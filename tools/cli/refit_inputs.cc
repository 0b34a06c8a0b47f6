// LoadRefitInputs: preset layouts or layout files, validated, with their topology.
#include "tools/cli/refit_inputs.h"

#include <algorithm>
#include <utility>

#include "core/layout/layout_io.h"
#include "core/layout/validate.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry::cli {
namespace {

Status CheckGpusPerNode(int gpus_per_node) {
  if (gpus_per_node >= 1) return Status::Ok();
  return InvalidArgument("--gpus-per-node must be positive, got " + std::to_string(gpus_per_node));
}

Result<RefitInputs> PresetInputs(const RefitSourceArgs& args) {
  if (args.source_spec.empty() || args.destination_spec.empty()) {
    return InvalidArgument("--model needs both --src and --dst framework specs, e.g. --src "
                           "megatron:pp=16,ep=16,first=3,last=2 --dst vllm:tp=32,ep=32,engines=8");
  }
  Result<models::ModelPreset> preset = models::MakePreset(args.model, args.scale);
  if (!preset.ok()) return preset.status().WithContext("--model " + args.model);
  Result<models::FrameworkSpec> src = models::ParseFrameworkSpec(args.source_spec);
  if (!src.ok()) return src.status().WithContext("--src " + args.source_spec);
  Result<models::FrameworkSpec> dst = models::ParseFrameworkSpec(args.destination_spec);
  if (!dst.ok()) return dst.status().WithContext("--dst " + args.destination_spec);
  FERRY_RETURN_IF_ERROR(CheckGpusPerNode(args.gpus_per_node));
  models::RefitOptions options;
  options.colocated = args.colocated;
  options.gpus_per_node = args.gpus_per_node;
  Result<models::RefitLayouts> refit = models::BuildRefitLayouts(*preset, *src, *dst, options);
  if (!refit.ok()) {
    return refit.status().WithContext(args.model + " with --src " + args.source_spec + " --dst " +
                                      args.destination_spec);
  }
  RefitInputs in;
  in.description = preset->config().name + ": " + refit->source_spec.ToString() + " -> " +
                   refit->destination_spec.ToString() + (args.colocated ? " (colocated)" : "");
  in.source = std::move(refit->source);
  in.destination = std::move(refit->destination);
  in.topology = std::move(refit->topology);
  return in;
}

Result<RefitInputs> FileInputs(const RefitSourceArgs& args) {
  if (args.source_layout_file.empty() || args.destination_layout_file.empty()) {
    return InvalidArgument("--src-layout and --dst-layout must be given together");
  }
  RefitInputs in;
  Result<Layout> src = LoadLayoutFile(args.source_layout_file);
  if (!src.ok()) return src.status().WithContext("--src-layout " + args.source_layout_file);
  Result<Layout> dst = LoadLayoutFile(args.destination_layout_file);
  if (!dst.ok()) return dst.status().WithContext("--dst-layout " + args.destination_layout_file);
  in.source = std::move(*src);
  in.destination = std::move(*dst);
  FERRY_RETURN_IF_ERROR(ValidateLayout(in.source).WithContext("source layout"));
  FERRY_RETURN_IF_ERROR(ValidateLayout(in.destination).WithContext("destination layout"));
  FERRY_RETURN_IF_ERROR(
      CheckCompatible(in.source, in.destination).WithContext("incompatible layouts"));
  int max_rank = -1;
  for (const Layout* l : {&in.source, &in.destination}) {
    for (int r : l->Ranks()) max_rank = std::max(max_rank, r);
  }
  if (!args.topology_file.empty()) {
    Result<Topology> topology = LoadTopologyFile(args.topology_file);
    if (!topology.ok()) return topology.status().WithContext("--topology " + args.topology_file);
    in.topology = std::move(*topology);
    if (in.topology.NumRanks() <= max_rank) {
      return InvalidArgument("--topology " + args.topology_file + " has " +
                             std::to_string(in.topology.NumRanks()) +
                             " ranks but the layouts use rank " + std::to_string(max_rank));
    }
  } else {
    FERRY_RETURN_IF_ERROR(CheckGpusPerNode(args.gpus_per_node));
    in.topology = Topology::Uniform(max_rank + 1, args.gpus_per_node);
  }
  in.description = args.source_layout_file + " -> " + args.destination_layout_file;
  return in;
}

}  // namespace

Result<RefitInputs> LoadRefitInputs(const RefitSourceArgs& args) {
  Result<RefitInputs> in = args.model.empty() ? FileInputs(args) : PresetInputs(args);
  if (!in.ok()) return in;
  int max_rank = -1;
  for (const Layout* l : {&in->source, &in->destination}) {
    for (int r : l->Ranks()) max_rank = std::max(max_rank, r);
  }
  in->ranks = max_rank + 1;
  return in;
}

}  // namespace ferry::cli
