// The two layouts and the topology of a refit, as the CLI commands name them: a model preset under
// two framework specs (tools/models/framework_layouts.h), or layout files (docs/layout-format.md)
// with an optional topology file. Shared by `ferry plan` and `ferry run`; `ferry simulate` takes the
// destination dtype from here.
#pragma once

#include <string>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"

namespace ferry::cli {

struct RefitSourceArgs {
  // Preset mode (when `model` is set).
  std::string model;
  double scale = 1.0;
  std::string source_spec, destination_spec;
  bool colocated = false;
  // File mode: layouts in YAML/JSON, optional topology (default: every rank up to the highest one
  // used, gpus_per_node per node).
  std::string source_layout_file, destination_layout_file, topology_file;
  int gpus_per_node = 8;
  // Either mode: a dtype name ("fp8_e4m3", "bf16", ...) for the destination's weights, or empty
  // (the layouts' dtypes). The weights are the tensors of two or more dims held in bf16 or fp16;
  // 1-dim tensors (norms, biases) and fp32 tensors (routers, for example) keep their dtype, as
  // engines loading an fp8 checkpoint keep them. A buffer holding both kinds keeps its tensors'
  // dtypes (its bytes could not be rescaled). The planner then converts (planner/conversion.h).
  std::string destination_dtype;
};

struct RefitInputs {
  std::string description;  // "deepseek-v3: megatron:... -> vllm:..." or "src.yaml -> dst.yaml"
  Layout source, destination;
  Topology topology;
  int ranks = 0;  // highest rank either layout uses + 1
  bool weights_converted = false;  // --dst-dtype changed the destination's weights' dtype
};

// A destination layout with its weights in another dtype (RefitSourceArgs::destination_dtype).
struct DestinationInDType {
  Layout layout;
  DType dtype = DType::kBF16;      // the weights' dtype, parsed from the name
  bool weights_converted = false;  // some tensor's dtype changed
};

// `destination` with its weights in the dtype named `name` (--dst-dtype, also for `ferry simulate`,
// which builds its layouts itself). Errors name --dst-dtype: an unknown dtype or one the planner
// does not convert to, a weight not on an element boundary of its buffer, UE8M0 block scales with
// weights in another dtype than bf16. Pure; thread-safe.
Result<DestinationInDType> DestinationWithWeightsIn(const Layout& destination, const std::string& name);

// Builds the preset layouts (model set) or loads, validates and checks the compatibility of the
// layout files. Errors name the argument at fault (--model, --src, --dst-layout, ...). Reads only
// the named files; thread-safe.
Result<RefitInputs> LoadRefitInputs(const RefitSourceArgs& args);

}  // namespace ferry::cli
