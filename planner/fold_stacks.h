// Stack folding: the planner's view of a family of equally shaped tensors as one stacked tensor.
//
// Models list experts (and layers) as separate tensors: "model.layers.3.mlp.experts.17.gate_proj
// .weight" for experts 0..255. Where a rank stores several members of such a family in one buffer
// at a constant byte stride (vLLM's stacked w13_weight, a trainer's stacked expert weights), those
// members' fragments are one strided fragment of the stacked tensor [members, ...shape]. Planning
// the stacked tensors moves the same bytes between the same buffers with 1/k of the pieces,
// messages and copy pairs, where k is the number of members a piece spans on both sides; a
// DeepSeek-V3 refit onto vLLM's EP ranks has k = 8.
//
// A family is a set of source tensors whose names are equal but for their last path component
// made only of decimal digits ("17" in the name above), with equal dtype and shape (at most 7 dims,
// so the stack fits kMaxDims). Members are ordered by that number; the destination's tensors join
// their family by name. A family is left unfolded when a destination tensor would join it with
// another shape or dtype or a number no source member has (planning then reports the mismatch in
// terms of the original tensors). A fragment of member j becomes the box [j, j+1) x box of the
// stack; consecutive members' fragments on one rank with equal boxes and strides, whose byte
// offsets in one buffer advance by one positive stride, merge into one fragment spanning them. A
// family is folded when its fragments merge on the layout with fewer fragments (read first); the
// other layout's fragments of it are then stacked whether or not they merge.
//
// The result is the stacked tensors with their fragments, and per layout a mask of the fragments
// now in a stack. The planner intersects the layouts without the masked fragments and the two
// stack layouts, and numbers the stack layouts' fragments and tensors after the originals': stack
// fragments keep the original buffer indexes, so the plan is a plan of the original layouts.
// Nothing of the original layouts is copied. Deterministic (depends only on the layouts' contents
// and order). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout/layout.h"

namespace ferry {

struct StackFold {
  // The stacked tensors (equal index and name on both sides) and each side's fragments of them.
  // Fragments index the original layouts' buffer tables; `buffers` is empty.
  Layout source_stacks;
  Layout destination_stacks;
  // By fragment id of the original layouts: 1 where the fragment is part of a stack's fragment.
  std::vector<uint8_t> source_folded;
  std::vector<uint8_t> destination_folded;
  int stacks = 0;  // families folded
};

// Folds `source` and `destination` into `out`. Returns false, leaving `out` unspecified, when
// folding would not make the layouts at least a quarter smaller (counted in fragments); planning
// the layouts as given is then as fast.
bool FoldTensorStacks(const Layout& source, const Layout& destination, StackFold& out);

}  // namespace ferry
