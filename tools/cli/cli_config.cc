// --config / --set: the configuration every planning or running command reads.
#include "tools/cli/cli_config.h"

#include "core/refit/config.h"

namespace ferry::cli {

void AddConfigOptions(CLI::App& command, ConfigArgs& args) {
  command.add_option("--config", args.file, "YAML file of options (see `ferry config`)");
  command.add_option("--set", args.settings,
                     "an option as name=value, over the file and FERRY_* variables (repeatable)");
}

Result<Config> LoadConfig(const ConfigArgs& args) {
  Config config = DefaultConfig();
  if (!args.file.empty()) FERRY_RETURN_IF_ERROR(config.LoadYamlFile(args.file).WithContext("--config"));
  FERRY_RETURN_IF_ERROR(config.ApplyProcessEnvironment());
  for (const std::string& setting : args.settings) {
    const size_t eq = setting.find('=');
    if (eq == std::string::npos) return InvalidArgument("--set " + setting + ": expected name=value");
    FERRY_RETURN_IF_ERROR(config.Set(setting.substr(0, eq), setting.substr(eq + 1)).WithContext("--set " + setting));
  }
  return config;
}

}  // namespace ferry::cli
