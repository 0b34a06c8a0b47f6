// RunSubcommand: one subcommand's argv through CLI11, as main.cc parses it.
#include "tests/tools/cli/run_cli_testutil.h"

namespace ferry::cli {

int RunSubcommand(AddCommandFn add, std::vector<std::string> argv) {
  CLI::App app{"ferry"};
  int exit_code = -1;
  add(app, &exit_code);
  argv.insert(argv.begin(), "ferry");
  std::vector<char*> ptrs;
  for (std::string& s : argv) ptrs.push_back(s.data());
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

}  // namespace ferry::cli
