// LoadRefitInputs: preset layouts or layout files, validated, with their topology; --dst-dtype
// rewrites the destination's weights to another dtype.
#include "tools/cli/refit_inputs.h"

#include <algorithm>
#include <string>
#include <vector>
#include <utility>

#include "core/base/dtype.h"
#include "core/layout/layout_io.h"
#include "core/layout/validate.h"
#include "tools/models/framework_layouts.h"
#include "planner/conversion.h"
#include "tools/models/hf_config.h"
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
  Result<models::ModelPreset> preset = models::MakeModel(args.model, args.scale);
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
  if (args.colocated) {
    return InvalidArgument("--colocated places a preset's destination on the source's ranks; layout "
                           "files name their ranks themselves (give the destination file the source's ranks)");
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

// Which tensors of `layout` hold `dtype` after --dst-dtype (RefitSourceArgs::destination_dtype):
// the weights, less those sharing a buffer with a tensor that keeps another dtype.
std::vector<char> ConvertedTensors(const Layout& layout, DType dtype) {
  std::vector<char> converts(layout.tensors.size());
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    converts[t] = spec.shape.size() >= 2 && spec.dtype != dtype &&
                  (spec.dtype == DType::kBF16 || spec.dtype == DType::kFP16);
  }
  for (bool changed = true; changed;) {  // until no buffer mixes kinds
    changed = false;
    std::vector<int> kind(layout.buffers.size(), -1);  // per buffer: its fragments' kind
    std::vector<char> mixed(layout.buffers.size(), 0);
    for (const Fragment& f : layout.fragments) {
      const int k = converts[f.tensor] ? static_cast<int>(layout.tensors[f.tensor].dtype) : 255;
      if (kind[f.loc.buffer] < 0) kind[f.loc.buffer] = k;
      mixed[f.loc.buffer] |= kind[f.loc.buffer] != k;
    }
    for (const Fragment& f : layout.fragments) {
      if (converts[f.tensor] && mixed[f.loc.buffer]) {
        converts[f.tensor] = 0;
        changed = true;
      }
    }
  }
  return converts;
}

// `layout` with the weights (ConvertedTensors) in `dtype`: their buffers rescaled by the ratio
// of element sizes, every other buffer as it was. Buffer and fragment indexes stay the same.
Result<Layout> WithWeightsIn(const Layout& layout, DType dtype) {
  const std::vector<char> converts = ConvertedTensors(layout, dtype);
  Layout out;
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    TensorSpec spec = layout.tensors[t];
    if (converts[t]) spec.dtype = dtype;
    FERRY_RETURN_IF_ERROR(out.AddTensor(spec).status());
  }
  std::vector<int64_t> old_size(layout.buffers.size(), 0);  // element size of a converted buffer
  for (const Fragment& f : layout.fragments) {
    if (converts[f.tensor]) old_size[f.loc.buffer] = DTypeSize(layout.tensors[f.tensor].dtype);
  }
  for (const BufferSpec& b : layout.buffers) out.GetOrAddBuffer(b.rank, b.name);
  for (const Fragment& f : layout.fragments) {
    const int64_t esize = old_size[f.loc.buffer];
    if (esize > 0 && f.loc.byte_offset % esize != 0) {
      return InvalidArgument("--dst-dtype: tensor '" + layout.tensors[f.tensor].name +
                             "' starts at byte " + std::to_string(f.loc.byte_offset) +
                             " of its buffer, not on an element boundary");
    }
    const int64_t offset = esize > 0 ? f.loc.byte_offset / esize * DTypeSize(dtype) : f.loc.byte_offset;
    out.PlaceFragment(f.tensor, f.box, f.loc.rank, layout.buffers[f.loc.buffer].name, offset,
                      f.loc.strides);
  }
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    const int64_t esize = old_size[b];
    out.buffers.SetBytes(b, esize > 0 ? (layout.buffers[b].bytes + esize - 1) / esize * DTypeSize(dtype)
                                      : layout.buffers[b].bytes);
  }
  out.padding = layout.padding;
  out.transforms = layout.transforms;
  out.block_scaled = layout.block_scaled;
  return out;
}

// Applies --dst-dtype to `in` (see RefitSourceArgs::destination_dtype).
Status ApplyDestinationDType(const std::string& name, RefitInputs& in) {
  FERRY_ASSIGN_OR_RETURN(DestinationInDType converted, DestinationWithWeightsIn(in.destination, name));
  in.weights_converted = converted.weights_converted;
  in.destination = std::move(converted.layout);
  in.description += " (weights as " + std::string(DTypeName(converted.dtype)) + ")";
  return Status::Ok();
}

}  // namespace

Result<DestinationInDType> DestinationWithWeightsIn(const Layout& destination, const std::string& name) {
  Result<DType> dtype = ParseDType(name);
  if (!dtype.ok()) return dtype.status().WithContext("--dst-dtype " + name);
  if (!PlannerConverts(DType::kBF16, *dtype) && *dtype != DType::kBF16) {
    return InvalidArgument("--dst-dtype " + name + ": ferry converts weights to bf16, fp16, fp32, "
                           "fp8_e4m3 or fp8_e5m2");
  }
  DestinationInDType out;
  out.dtype = *dtype;
  FERRY_ASSIGN_OR_RETURN(out.layout, WithWeightsIn(destination, *dtype));
  for (size_t t = 0; t < out.layout.tensors.size(); ++t) {
    out.weights_converted |= out.layout.tensors[t].dtype != destination.tensors[t].dtype;
  }
  // vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py: DeepGEMM runs (and requantizes to
  // UE8M0) linear weights of bf16 models only, so UE8M0 scales chosen for bf16 weights
  // (tools/models/fp8_block_weights.h RequantizedToUe8m0) do not hold for weights in another dtype
  bool ue8m0 = false;
  for (const BlockScaledBuffer& s : destination.block_scaled) {
    ue8m0 |= Fp8ScaleIsUe8m0(s.scale_fmt);
  }
  if (ue8m0 && out.weights_converted && *dtype != DType::kBF16) {
    return InvalidArgument("--dst-dtype " + name + " with UE8M0 block scales (scale_fmt=ue8m0 or ue8m0_packed): "
                           "vLLM runs linear weights through DeepGEMM, and requantizes their "
                           "scales to UE8M0, only for bf16 models; not modelled for " + name);
  }
  return out;
}

Result<RefitInputs> LoadRefitInputs(const RefitSourceArgs& args) {
  Result<RefitInputs> in = args.model.empty() ? FileInputs(args) : PresetInputs(args);
  if (!in.ok()) return in;
  if (!args.destination_dtype.empty()) {
    FERRY_RETURN_IF_ERROR(ApplyDestinationDType(args.destination_dtype, *in));
  }
  int max_rank = -1;
  for (const Layout* l : {&in->source, &in->destination}) {
    for (int r : l->Ranks()) max_rank = std::max(max_rank, r);
  }
  in->ranks = max_rank + 1;
  return in;
}

}  // namespace ferry::cli
