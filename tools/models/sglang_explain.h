// `ferry layout --explain` for an SGLang layout: the rules that place one checkpoint tensor in
// SGLang's parameters (tools/models/sglang_layout.h), each with the sgl-project/sglang file it
// follows. Internal to tools/models' layout_explain.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "tools/models/layout_explain.h"
#include "tools/models/presets.h"
#include "tools/models/sglang_spec.h"

namespace ferry::models {

// The rules for `tensor` under `resolved` (ResolveSglang's output), in the order they apply.
std::vector<LayoutRule> SglangRulesForTensor(const ModelConfig& config,
                                             const SglangParallel& resolved,
                                             const std::string& tensor);

}  // namespace ferry::models
