// Framework layouts, the public entry point of tools/models: the layout of a ModelPreset under a
// framework spec (Megatron-LM trainer, tools/models/megatron_layout.h; vLLM and SGLang inference
// engines, tools/models/vllm_layout.h, tools/models/sglang_layout.h), and the source and
// destination layouts of one refit with the topology of their ranks. Specs and their grammar:
// tools/models/framework_spec.h.
//
// Pure functions; thread-safe.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "tools/models/framework_spec.h"
#include "tools/models/presets.h"

namespace ferry::models {

// The layout of `preset` under `spec` (resolved first) on ranks first_rank .. first_rank+n-1. A spec
// with mtp=N holds the model's first N MTP layers, whose tensors join the preset's
// (WithMtpLayers) when it lacks them.
Result<Layout> BuildFrameworkLayout(const ModelPreset& preset, const FrameworkSpec& spec,
                                    int first_rank = 0);

struct RefitOptions {
  bool colocated = false;  // destination on the source's ranks (0..), not after them
  int gpus_per_node = 8;
};

// Source and destination layouts of one refit plus the topology of all their ranks.
struct RefitLayouts {
  FrameworkSpec source_spec;       // resolved
  FrameworkSpec destination_spec;  // resolved
  int destination_first_rank = 0;
  Layout source;
  Layout destination;
  Topology topology;
};

// Source on ranks 0..M-1; destination on M..M+N-1, or on 0..N-1 when colocated. The topology
// spans max(M+N, ...) ranks (all ranks either side uses), gpus_per_node per node. A destination
// with more MTP layers than the source (mtp=) is refused: nothing would feed them.
Result<RefitLayouts> BuildRefitLayouts(const ModelPreset& preset, const FrameworkSpec& source,
                                       const FrameworkSpec& destination,
                                       const RefitOptions& options = {});

}  // namespace ferry::models
