// Tensor stacks: one tensor of a layout standing for a family of equally shaped tensors, as
// frameworks store a layer's experts (vLLM's w13_weight, Megatron-Core's grouped expert weights).
//
// A tensor whose name has a '.'-separated component "[first:end]" (decimal, 0 <= first < end) is a
// *tensor stack*: "model.layers.3.mlp.experts.[0:256].gate_proj.weight" of shape [256, 2048, 7168]
// stands for the 256 tensors "model.layers.3.mlp.experts.<j>.gate_proj.weight" of shape
// [2048, 7168], j = 0..255, and index i of its dim 0 is member first + i. When a name has several
// such components, the last one counts. A layout may describe a family either way; planning two
// layouts that describe it alike is fastest (nothing to fold or rewrite), and where they differ
// the planner rewrites one of them first (StackMembers or UnstackTensors). See
// docs/layout-format.md.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry {

struct TensorStackName {
  std::string prefix;  // the name before the "[first:end]" component
  int64_t first = 0;
  int64_t end = 0;
  std::string suffix;  // the name after it

  int64_t size() const { return end - first; }
  // "<prefix><member><suffix>", member in [first, end).
  std::string MemberName(int64_t member) const;
  // Replaces `out` with MemberName(member), reusing its storage (for loops over many members).
  void AssignMemberName(int64_t member, std::string& out) const;
  // "<prefix>[first:end]<suffix>".
  std::string ToString() const;
};

// The stack component of `name`, or nullopt when it has none (a plain tensor). Numbers of 1 to 18
// digits; "[3:3]", "[5:2]", "[:4]", "[a:b]" or "x[0:4]" are not stack components.
std::optional<TensorStackName> ParseTensorStackName(std::string_view name);

// OK when `tensor`'s shape fits its stack name `stack`: at least 2 dims, the first of them the
// number of members; otherwise InvalidArgument naming the tensor and the shape it needs.
Status CheckTensorStackShape(const TensorSpec& tensor, const TensorStackName& stack);

// The tensor stacks of `from` (its tensors with a stack name) that `layout` has no tensor of the
// same name for, in `from`'s order.
std::vector<TensorSpec> StacksMissingIn(const Layout& layout, const Layout& from);

// Whether planning `source` into `destination` can take their tensor stacks as they are: every
// destination stack is a source tensor of the same name, and no destination tensor is a member of
// a source stack that the destination does not have. O(tensors); reads only names.
bool TensorStacksAgree(const Layout& source, const Layout& destination);

// A layout's tensors with every tensor stack replaced by its members, in UnstackTensors's order,
// and where each of the layout's tensors went.
struct UnstackedTensors {
  std::vector<TensorSpec> tensors;
  std::vector<int> first_of;  // by tensor of the layout: its first tensor in `tensors`
  std::vector<char> stacked;  // by tensor of the layout: whether it is a stack
};
// The tensors of UnstackTensors(layout), without touching its fragments; the same errors for
// tensors.
Result<UnstackedTensors> UnstackTensorSpecs(const Layout& layout);
// A member's box of the stack box `box` ([lo, hi) x rest): `rest`, dim 0 (the member index)
// dropped.
Box StackMemberBox(const Box& box);
// OK when fragment `f` of tensor stack `stack` has its ndim and lies inside it along dim 0.
Status CheckStackFragment(const Fragment& f, const TensorSpec& stack);
// Member j (an index of dim 0 inside f.box) of a checked stack fragment `f`, as UnstackTensors
// makes it: the tensor members.first_of[f.tensor] + j, one dim-0 stride further per member.
Fragment StackMemberFragment(const Fragment& f, const UnstackedTensors& members, int64_t j,
                             int64_t element_bytes);

// The layout with every tensor stack replaced by its members: a stack's tensor becomes its members
// in order (other tensors keep their order), and a stack fragment covering members [a, b) becomes
// b - a member fragments at byte offsets one dim-0 stride apart, in the stack fragment's place.
// Buffers and padding are kept (padding split likewise). Errors: a stack whose shape does not have
// size() along dim 0 or has a single dim, or a member name that is also a tensor of the layout.
Result<Layout> UnstackTensors(const Layout& layout);

// The layout with the tensors that are members of `stacks` (tensor stacks, typically named by the
// other layout of a refit) replaced by those stacks, the inverse of UnstackTensors: member e's
// fragment becomes the box [e - first, e - first + 1) x its box, and a run of consecutive members
// on one rank with equal boxes and strides whose byte offsets in one buffer advance by one positive
// stride (a multiple of the element size) becomes one fragment with that dim-0 stride. Members
// are found by name: a '.'-separated decimal component without leading zeros in the place of the
// stack's range. Stacks none of whose members the layout lists are not added. Other tensors,
// buffers and padding are kept (members' padding becomes the stack's). `stacked` is set to the
// number of tensors replaced. Errors: a member whose shape or dtype is not the stack's member
// shape and dtype, or a stack that is not a valid tensor stack. O(tensors + fragments).
Result<Layout> StackMembers(const Layout& layout, const std::vector<TensorSpec>& stacks,
                            int64_t* stacked = nullptr);

}  // namespace ferry
