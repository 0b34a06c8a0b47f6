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
// Fragments keep their buffer indexes, so a plan of the folded layouts addresses the original
// buffers: it is a plan of the original layouts. Deterministic (depends only on the layouts'
// contents and order). Thread-safe: no shared state.
#pragma once

#include <cstdint>

#include "core/layout/layout.h"

namespace ferry {

struct StackFold {
  // The layouts to plan: stacks first (equal index and name in both), then the unfolded tensors
  // of each side. Their `buffers` are left empty (copying every buffer name would cost more than
  // the fold): fragments index the original layouts' buffer tables. Not for name lookups.
  Layout source;
  Layout destination;
  int stacks = 0;  // families folded
};

// Folds `source` and `destination` into `out`. Returns false, leaving `out` unspecified, when
// folding would not make the layouts at least a quarter smaller (counted in fragments); planning
// the layouts as given is then as fast.
bool FoldTensorStacks(const Layout& source, const Layout& destination, StackFold& out);

}  // namespace ferry
