// Twin buffers into staging slots: the step shared by the planner passes that plan a destination
// tensor as delivered into "twin" buffers of the planning layout (buffers appended after the
// destination layout's own) and then finish it on the destination rank from staging
// (planner/block_quantize.h, planner/element_transforms.h). Internal to //planner.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <vector>

#include "core/plan/plan.h"

namespace ferry {

// Rewrites every place of `plan` in a twin buffer (destination buffer index >= first_twin: the
// data of a Send/Recv/Forward, either region of a copy pair) into staging slot
// slot_of_twin[buffer - first_twin], at the same offset. Returns, per twin (by buffer -
// first_twin), the ids of the ops that touch it, ascending and distinct: what the op that
// finishes the twin depends on.
std::vector<std::vector<int>> TwinsToSlots(TransferPlan& plan, size_t first_twin,
                                           const std::vector<int>& slot_of_twin);

}  // namespace ferry
