// Entry point of the `ferry` CLI binary: registers every subcommand and runs the chosen one.
#include <CLI/CLI.hpp>

#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: move sharded tensors between GPU groups laid out differently"};
  app.require_subcommand(1);
  int exit_code = 0;
  ferry::cli::AddLayoutCommand(app, &exit_code);
  ferry::cli::AddPlanCommand(app, &exit_code);
  ferry::cli::AddSimulateCommand(app, &exit_code);
  ferry::cli::AddConfigCommand(app, &exit_code);
  ferry::cli::AddRunCommand(app, &exit_code);
  ferry::cli::AddBenchCommand(app, &exit_code);
  ferry::cli::AddStoreCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
