// Emission of a reshard plan: the ops, staging slots, deps and copy pairs of the routed, selected
// and ordered deliveries. Per rank one Copy op for its local copies; per message a Pack on the
// sender (unless one contiguous region is sent as it lies), a Send to the tree's root, and per
// tree member a Recv (straight into its fragment when that is the one contiguous place the
// message is for, else into a slot and an Unpack) and a Forward to each of its children.
// Internal to //planner.
#pragma once

#include <cstddef>
#include <vector>

#include "core/layout/layout.h"
#include "core/plan/plan.h"
#include "planner/intersect.h"
#include "planner/messages.h"
#include "planner/plan_facts.h"
#include "planner/routing.h"
#include "planner/tree_table.h"

namespace ferry {

// Fragment `index` of `table`.
struct FragmentAt {
  const FragmentTable* table;
  size_t index;
};

// Fragments by id: a layout's own, then (ids from its count on) those of its stack layout
// (planner/fold_stacks.h).
class FragmentsById {
 public:
  FragmentsById(const Layout& layout, const Layout* stacks)
      : own_(&layout.fragments),
        count_(layout.fragments.size()),
        stacked_(stacks != nullptr ? &stacks->fragments : nullptr) {}
  FragmentAt operator[](size_t id) const {
    return id < count_ ? FragmentAt{own_, id} : FragmentAt{stacked_, id - count_};
  }

 private:
  const FragmentTable* own_;
  size_t count_;
  const FragmentTable* stacked_;
};

// What emission reads.
struct EmitInputs {
  const Intersection& inter;
  const PlanFacts& facts;
  const FragmentsById& src_frags;
  const FragmentsById& dst_frags;
  const TreeTable& trees;
  const Routes& routes;        // local copies and tree members' fragments
  const MessageOrder& order;   // deliveries and messages in round order
  int num_ranks;
};

// Appends the plan's ops, slots, deps and copy pairs.
void EmitOps(const EmitInputs& in, TransferPlan& plan);

}  // namespace ferry
