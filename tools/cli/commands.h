// The `ferry` CLI's subcommands. Each lives in its own cmd_*.cc and registers itself on the app;
// its callback stores the process exit code in *exit_code (0 = success) and prints errors to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry::cli {

void AddLayoutCommand(CLI::App& app, int* exit_code);     // ferry layout
void AddPlanCommand(CLI::App& app, int* exit_code);       // ferry plan
void AddSimulateCommand(CLI::App& app, int* exit_code);   // ferry simulate
void AddRunCommand(CLI::App& app, int* exit_code);        // ferry run / ferry demo
void AddBenchCommand(CLI::App& app, int* exit_code);      // ferry bench
void AddConfigCommand(CLI::App& app, int* exit_code);     // ferry config
void AddStoreCommand(CLI::App& app, int* exit_code);      // ferry store

}  // namespace ferry::cli
