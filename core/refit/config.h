// ferry's whole option table: the planner's (planner.*), the communicator's (transport.*,
// deadline.*), the executor's (executor.*) and every registered transport's, at their defaults.
// Load a YAML file and FERRY_* variables over it; `ferry config` prints it.
#pragma once

#include "core/base/config.h"
#include "core/runtime/transport.h"

namespace ferry {

Config DefaultConfig(const TransportRegistry& registry = TransportRegistry::Default());

}  // namespace ferry
