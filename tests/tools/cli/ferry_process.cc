// Test helper: see ferry_process.h.
#include "tests/tools/cli/ferry_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace ferry::cli::testing {

Outcome RunFerry(const std::vector<std::string>& args, double timeout_seconds) {
  static int counter = 0;
  const std::string log =
      std::string(std::getenv("TEST_TMPDIR")) + "/ferry-" + std::to_string(counter++) + ".log";
  std::vector<std::string> argv = {"tools/cli/ferry"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    std::FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out == nullptr) ::_exit(126);
    ::dup2(::fileno(stdout), 2);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  Outcome outcome;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      outcome.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!outcome.timed_out && WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  // Rank processes die with the launcher (PR_SET_PDEATHSIG); give the kernel a moment, then
  // nothing of the group may be left.
  for (int i = 0; i < 100 && ::kill(-pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (::kill(-pid, 0) == 0) {
    outcome.group_left_processes = true;
    ::kill(-pid, SIGKILL);
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  outcome.output = text.str();
  return outcome;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace ferry::cli::testing
