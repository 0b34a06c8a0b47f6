// `ferry layout --explain TENSOR`: one tensor of a framework layout, its fragments rank by rank
// (buffer, box, byte offset, element strides) and the rules that placed them, each with the
// upstream file it follows.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/models/framework_spec.h"
#include "tools/models/presets.h"

namespace ferry::models {

struct LayoutRule {
  std::string rule;      // what ferry does, in a line
  std::string upstream;  // repository and path of the code it follows
};

// The rules that shape `tensor` (a checkpoint name, or an expert stack name) in the layout of
// `resolved` (ResolveFrameworkSpec's output) for `config`, in the order they apply.
std::vector<LayoutRule> RulesForTensor(const ModelConfig& config, const FrameworkSpec& resolved,
                                       const std::string& tensor);

// The text `ferry layout --explain` prints: the tensor's shape and dtype, one line per fragment
// ordered by rank, then its rules. A checkpoint name of an expert that `layout` holds as a stack
// is looked up in the stack's expansion. NotFound naming the tensor when the layout lacks it.
Result<std::string> ExplainTensor(const ModelConfig& config, const FrameworkSpec& resolved,
                                  const Layout& layout, const std::string& tensor);

}  // namespace ferry::models
