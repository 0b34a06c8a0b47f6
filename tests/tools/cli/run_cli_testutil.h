// Test helper for the CLI's subcommands: parses an argv through a CLI11 app that has only the
// subcommand under test, the way main.cc does, and returns the exit code its callback stored.
#pragma once

#include <string>
#include <vector>

#include "tools/cli/commands.h"

namespace ferry::cli {

// Adds one subcommand to `app` (AddPlanCommand, AddSimulateCommand, ...).
using AddCommandFn = void (*)(CLI::App& app, int* exit_code);

// Runs `argv` (without the program name) through an app with `add`'s subcommand. Returns the exit
// code the callback stored, CLI11's code for a parse error, or -1 when no callback ran.
int RunSubcommand(AddCommandFn add, std::vector<std::string> argv);

}  // namespace ferry::cli
