// The planner's fragment intersection as it was before its speed-up (a frozen copy, tests only):
// the oracle intersect_test compares the current planner/intersect.cc against, field by field.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "planner/intersect.h"

namespace ferry::reference {

// Same contract as ferry::IntersectLayouts (planner/intersect.h).
Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination);

}  // namespace ferry::reference
