// The framework layouts of a preset refit, built once per (model, source, destination) and kept
// for the process: the planner benchmarks plan the same refits again and again. Not thread-safe.
#pragma once

#include <string>

#include "tools/models/framework_layouts.h"

namespace ferry {

// Layouts of `model` from `src` (e.g. "megatron:pp=16,ep=16,first=3,last=2") to `dst` (e.g. "vllm:tp=32,dp=8");
// aborts on an unknown preset or spec (benchmark setup, not user input).
const models::RefitLayouts& CachedRefit(const std::string& model, const std::string& src,
                                        const std::string& dst);

}  // namespace ferry
