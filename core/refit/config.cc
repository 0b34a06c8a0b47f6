// DefaultConfig: the option tables of every layer, assembled.
#include "core/refit/config.h"

#include "core/runtime/executor_options.h"
#include "core/runtime/runtime_options.h"
#include "planner/options.h"

namespace ferry {

Config DefaultConfig(const TransportRegistry& registry) {
  std::vector<OptionSpec> table = PlannerOptions::Table().Specs();
  std::vector<OptionSpec> runtime = RuntimeConfig(registry).table();
  table.insert(table.end(), runtime.begin(), runtime.end());
  return Config(std::move(table));
}

Status CheckConfig(const Config& config) {
  FERRY_RETURN_IF_ERROR(PlannerOptions::FromConfig(config).status());
  FERRY_RETURN_IF_ERROR(ExecutorOptions::FromConfig(config).status());
  return CheckCoreOptions(config);
}

}  // namespace ferry
