// Destination tensors stored through an element function (a StoredTransform whose text is an
// ElementFn's, core/base/element_fn.h: today vLLM's Mamba A = -exp(A_log) in fp32). The planner
// delivers the source's values of each such fragment, in the source's dtype (the wire carries
// A_log as the trainer holds it), into a staging slot on the destination rank, and a Convert op
// there writes the fragment: each pair reads the slot and applies the function (CopyPair::fn).
//
// Two steps around the ordinary planner passes, as for block-scaled fp8 (planner/block_quantize.h):
//   PrepareElementTransforms  the destination layout with each fragment of such a tensor moved
//                             into a "twin" buffer of its own (appended after the layout's
//                             buffers, dense, of the source's dtype), the tensor's dtype the
//                             source's and its StoredTransform dropped: plain copies, planned as
//                             any other.
//   FinishElementTransforms   the plan's twin regions become staging slots, the destination
//                             buffer table the layout's again, and one Convert op per fragment
//                             after every op of its rank that touches the slot.
// Other StoredTransforms are left in the layout, for CheckNoStoredTransforms to refuse by name. A
// layout without element-function transforms is planned as before: Prepare returns no twins and
// the plan is untouched (byte-identical).
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <vector>

#include "core/base/element_fn.h"
#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

// One destination fragment stored through an element function, and its twin.
struct TransformTwin {
  int rank = 0;
  Region to;                   // the fragment in its destination buffer, of its stored dtype
  DType dtype = DType::kBF16;  // the twin's: the source tensor's dtype
  ElementFn fn = ElementFn::kNone;
  int twin = 0;  // the twin buffer's index in ElementTransformLayout::destination
};

struct ElementTransformLayout {
  Layout destination;  // the planning layout; unused when `twins` is empty
  std::vector<TransformTwin> twins;
  size_t original_buffers = 0;  // the destination layout's buffer count
};

// Twins for every fragment of `destination`'s tensors stored through an element function.
// InvalidArgument, naming the tensor, when the source lacks it or holds it in a dtype the function
// does not read (bf16, fp16, fp32), or when it is stored in a dtype other than fp32.
Result<ElementTransformLayout> PrepareElementTransforms(const Layout& source, const Layout& destination);

// Rewrites `plan` (planned on prepared.destination) to the destination layout's buffers and adds
// the Convert ops. `destination` is the layout given to PrepareElementTransforms.
void FinishElementTransforms(const ElementTransformLayout& prepared, const Layout& destination,
                             TransferPlan& plan);

}  // namespace ferry
