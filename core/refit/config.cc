// DefaultConfig: the option tables of every layer, assembled.
#include "core/refit/config.h"

#include "planner/options.h"

namespace ferry {

Config DefaultConfig(const TransportRegistry& registry) {
  std::vector<OptionSpec> table = PlannerOptions::Table().Specs();
  std::vector<OptionSpec> runtime = RuntimeConfig(registry).table();
  table.insert(table.end(), runtime.begin(), runtime.end());
  return Config(std::move(table));
}

}  // namespace ferry
