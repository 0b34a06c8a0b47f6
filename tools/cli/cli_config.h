// The options every command that plans or runs shares: `--config FILE` and `--set name=value`,
// applied over ferry::DefaultConfig() in a fixed order (defaults < YAML file < FERRY_* environment
// < --set), so that `ferry plan`, `simulate`, `run`, `demo` and `bench` read one configuration the
// same way and plan the same thing from it.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/base/config.h"
#include "core/base/status.h"

namespace ferry::cli {

struct ConfigArgs {
  std::string file;                   // --config: a YAML file of options (may be empty)
  std::vector<std::string> settings;  // --set name=value, in order
};

// Adds --config and --set to `command`, storing into `args` (which must outlive the parse).
void AddConfigOptions(CLI::App& command, ConfigArgs& args);

// DefaultConfig() with args.file, the process's FERRY_* variables and args.settings applied. Errors
// name the flag at fault.
Result<Config> LoadConfig(const ConfigArgs& args);

}  // namespace ferry::cli
