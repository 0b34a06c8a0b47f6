// One kill-harness trial (see kill_trial.h): fork/exec of `ferry run` in its own process group,
// its output collected through a pipe, then parsed.
#include "tools/kill/kill_trial.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace ferry::kill {
namespace {

std::vector<std::string> Command(const TrialSpec& spec) {
  return {spec.ferry, "run", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
          "megatron:tp=2,ep=2", "--dst", "vllm:tp=2,dp=2", "--transport", spec.transport,
          "--iterations", "2", "--warmup", "1", "--timeout", std::to_string(spec.timeout_s),
          "--set", std::string("executor.direct_intra_node=") + (spec.direct_reads ? "true" : "false"),
          "--set", "deadline.peer_dead=" + std::to_string(spec.peer_dead_s), "--store-host", spec.store_host};
}

// Exits traced for ranks other than `faulty`.
int SurvivorExits(const std::string& output, int faulty) {
  int count = 0;
  for (size_t at = output.find("ferry-launch: rank "); at != std::string::npos;
       at = output.find("ferry-launch: rank ", at + 1)) {
    if (std::atoi(output.c_str() + at + 19) != faulty) ++count;
  }
  return count;
}

// Runs `argv` with FERRY_INJECT_FAULT and FERRY_LAUNCH_TRACE until the 7 survivors have exited
// (a stopped rank is then killed with the group) or `limit_s`; returns stdout and stderr together.
Result<std::string> Capture(const std::vector<std::string>& argv, const std::string& fault,
                            int faulty, double limit_s) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return IoError("kill harness: pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) return IoError("kill harness: fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::setenv("FERRY_INJECT_FAULT", fault.c_str(), 1);
    ::setenv("FERRY_LAUNCH_TRACE", "1", 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(pipe_fds[1]);
  std::string output;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    output.append(buffer, static_cast<size_t>(n));
    if (SurvivorExits(output, faulty) >= 7) break;
  }
  ::kill(-pid, SIGKILL);  // whatever is left (a stopped rank the launcher did not reap)
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pipe_fds[0]);
  return output;
}

}  // namespace

Result<TrialResult> RunTrial(const TrialSpec& spec) {
  const std::string fault = std::to_string(spec.rank) + ":" + spec.fault + ":" + spec.moment;
  FERRY_ASSIGN_OR_RETURN(std::string output, Capture(Command(spec), fault, spec.rank, spec.timeout_s + 10));
  TrialResult result;
  result.output = output;
  long long fired_ns = -1;
  std::map<int, long long> exited_ns;
  std::map<int, std::string> error_of;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    int rank = 0;
    long long ns = 0;
    char kind[16];
    if (std::sscanf(line.c_str(), "ferry-fault: rank %d %15s at %lld", &rank, kind, &ns) == 3) {
      fired_ns = ns;
    } else if (std::sscanf(line.c_str(), "ferry-launch: rank %d exited at %lld", &rank, &ns) == 2) {
      exited_ns[rank] = ns;
    } else if (std::sscanf(line.c_str(), "ferry run: rank %d:", &rank) == 1) {
      error_of[rank] = line;
    }
  }
  const std::string tail = output.substr(output.size() > 1500 ? output.size() - 1500 : 0);
  if (fired_ns < 0) return Internal("kill harness: the fault " + fault + " never fired:\n" + tail);
  const std::string died = "rank " + std::to_string(spec.rank) + " died";
  const std::string hung = "rank " + std::to_string(spec.rank) + " sent no heartbeat";
  result.named = true;
  result.on_their_own = true;
  long long last = fired_ns;
  for (int r = 0; r < 8; ++r) {
    if (r == spec.rank) continue;
    if (exited_ns.count(r) == 0) {
      return Internal("kill harness: no exit traced for rank " + std::to_string(r) + ":\n" + tail);
    }
    last = std::max(last, exited_ns[r]);
    const std::string killed = "rank " + std::to_string(r) + " killed after another rank failed";
    if (output.find(killed) != std::string::npos) result.on_their_own = false;
    const std::string& error = error_of[r];
    if (error.find(died) == std::string::npos && error.find(hung) == std::string::npos) result.named = false;
  }
  result.seconds = static_cast<double>(last - fired_ns) * 1e-9;
  return result;
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, index == 0 ? 0 : index - 1)];
}

}  // namespace ferry::kill
