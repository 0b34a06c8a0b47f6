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
// family is folded when its fragments merge on the layout with fewer fragments (merged up front);
// the other layout's fragments of it are then stacked whether or not they merge. Before any name
// is read, that layout must hold a run of three fragments of equal boxes at a constant stride in
// one buffer; so a family only ever two members long in it is not folded.
//
// The result is, per layout, a StackSide: the stack tensors with that layout's fragments of them,
// and which of the layout's own fragments they replace. The planner intersects the layouts with
// those fragments left out (a StackSide is the FragmentDiverter of its layout: the larger layout's
// members are merged as the intersection's pass reads them, so they are read once), then the two
// stack layouts, numbered after the originals. Stack fragments keep the original buffer indexes,
// so the plan is a plan of the original layouts, and nothing of them is copied. Deterministic
// (depends only on the layouts' contents and order). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout/layout.h"
#include "planner/intersect.h"

namespace ferry {

struct StackFold;
class StackFolder;

// One layout's part of a fold. Not thread-safe.
class StackSide final : public FragmentDiverter {
 public:
  // True when fragment `id` of the layout is part of a stack fragment (merging it into the stacks
  // on the side merged during the intersection's pass): the intersection leaves it out. Offer
  // each fragment once, in id order.
  bool Divert(const FragmentTable& fragments, size_t id) override;
  // True for a member of a folded family all of whose fragments Divert takes (on the side merged
  // during the pass, every member: a fragment it would not take is invalid, and fails planning).
  bool TakesWholeTensor(int tensor) const override {
    const size_t t = static_cast<size_t>(tensor);
    if (!folded_.empty()) return tensor >= 0 && t < whole_tensor_.size() && whole_tensor_[t] != 0;
    return tensor >= 0 && t < member_of_tensor_.size() && member_of_tensor_[t].stack >= 0;
  }
  // The stacked tensors (equal index and name on both sides) and this side's fragments of them,
  // complete once every fragment was offered to Divert (the side merged up front: at once).
  // Fragments index the layout's buffer table; `buffers` is empty.
  const Layout& stacks() const { return stacks_; }

 private:
  friend class StackFolder;  // fold_stacks.cc: FoldTensorStacks' state
  static constexpr int kRunTableBits = 12;
  // An open run: a stack fragment that may still grow by the next member.
  struct Run {
    int64_t fragment = -1;    // index in stacks_.fragments
    int next_position = 0;
    int stack = -1;           // the stack fragment's tensor; -1: the slot holds no run
    int64_t last_offset = 0;  // byte offset of the run's last member
    int64_t stride = 0;       // bytes between members; 0 while the run has one member
  };
  // Merges member `position` of stack `stack` (elements of `esize` bytes) into an open run or
  // starts a stack fragment; true when it started one.
  bool Merge(const FragmentView& f, int stack, int position, int64_t esize);

  std::vector<uint8_t> folded_;  // merged up front: by fragment id, 1 when in a stack fragment
  std::vector<uint8_t> whole_tensor_;  // merged up front: by tensor, TakesWholeTensor
  // Merged during the pass: per tensor of the layout, its stack (or -1), position in it and bytes
  // per element, read together for each fragment.
  struct StackMember {
    int stack = -1;
    int position = 0;
    int esize = 1;
  };
  std::vector<StackMember> member_of_tensor_;
  std::vector<Run> runs_;  // direct-mapped by a hash of (stack, rank, buffer, box, strides)
  std::vector<size_t> last_run_of_stack_;  // per stack Merge is given: the slot it used last
  Layout stacks_;
};

struct StackFold {
  StackSide source;
  StackSide destination;
  int stacks = 0;  // families folded
};

// Folds `source` and `destination` into `out`. Returns false, leaving `out` unspecified, when no
// family merges on the smaller layout: the layouts are then planned as given.
bool FoldTensorStacks(const Layout& source, const Layout& destination, StackFold& out);

}  // namespace ferry
