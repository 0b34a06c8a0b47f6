// `ferry config`: prints every option (planner, runtime and every linked transport) with its value, default,
// environment variable and help, after applying an optional YAML file and the FERRY_* environment;
// exits 2 when a value would be refused by the planner, the executor or a session.
#include <cstdio>
#include <string>

#include "core/refit/config.h"
#include "core/runtime/bootstrap.h"
#include "core/runtime/transport.h"
#include "tools/cli/commands.h"

namespace ferry::cli {

void AddConfigCommand(CLI::App& app, int* exit_code) {
  CLI::App* command = app.add_subcommand(
      "config", "print every option with its value, default, FERRY_* variable and help");
  auto file = std::make_shared<std::string>();
  auto ignore_env = std::make_shared<bool>(false);
  command->add_option("--file", *file, "YAML config file to apply before the environment");
  command->add_flag("--no-env", *ignore_env, "do not apply FERRY_* environment variables");
  command->callback([file, ignore_env, exit_code] {
    Config config = DefaultConfig();
    Status status;
    if (!file->empty()) status = config.LoadYamlFile(*file);
    if (status.ok() && !*ignore_env) status = config.ApplyProcessEnvironment();
    if (!status.ok()) {
      std::fprintf(stderr, "ferry config: %s\n", status.message().c_str());
      *exit_code = 2;
      return;
    }
    std::printf("# ferry options: defaults < YAML file (--file) < FERRY_* environment\n");
    std::printf("# transports linked in: ");
    bool first = true;
    for (const TransportRegistration& t : TransportRegistry::Default().Registrations()) {
      std::printf("%s%s", first ? "" : ", ", t.name.c_str());
      first = false;
    }
    std::printf("\n\n%s", config.Describe().c_str());
    std::printf("\n# bootstrap variables (read by every rank at start; not options)\n");
    for (const BootstrapVariable& v : BootstrapVariables()) std::printf("%-22s %s\n", v.name, v.help);
    // A value the listing shows but a plan or session would refuse is reported here, not later.
    if (Status valid = CheckConfig(config); !valid.ok()) {
      std::fflush(stdout);
      std::fprintf(stderr, "ferry config: %s\n", valid.message().c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace ferry::cli
