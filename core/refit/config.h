// ferry's whole option table: the planner's (planner.*), the communicator's (transport.*,
// deadline.*), the executor's (executor.*) and every registered transport's, at their defaults.
// Load a YAML file and FERRY_* variables over it; `ferry config` prints it.
#pragma once

#include "core/base/config.h"
#include "core/runtime/transport.h"

namespace ferry {

Config DefaultConfig(const TransportRegistry& registry = TransportRegistry::Default());

// Whether the planner's (planner.*), the executor's (executor.*) and the communicator's
// (deadline.*) options of `config` parse and lie in their ranges, as a plan or a session reads
// them: the first option that does not, named with its value and limit. `ferry config` reports it.
Status CheckConfig(const Config& config);

}  // namespace ferry
