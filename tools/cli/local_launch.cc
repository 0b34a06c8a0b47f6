// Local launch of one process per rank with a deadline; children never outlive the launcher.
#include "tools/cli/local_launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "core/base/deadline.h"
#include "core/runtime/socket_util.h"

namespace ferry::cli {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// With FERRY_LAUNCH_TRACE set, says on stderr when each rank's exit was reaped (CLOCK_REALTIME ns),
// for the kill harness (tools/kill_harness.py) to time detection by.
void TraceExit(int rank) {
  if (Env("FERRY_LAUNCH_TRACE") == nullptr) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::fprintf(stderr, "ferry-launch: rank %d exited at %lld\n", rank, static_cast<long long>(ns));
}

}  // namespace

bool LaunchedAsRank() {
  if (Env("RANK") != nullptr && Env("WORLD_SIZE") != nullptr) return true;
  if (Env("OMPI_COMM_WORLD_RANK") != nullptr) return true;
  if (Env("SLURM_PROCID") != nullptr) {
    const char* n = Env("SLURM_NTASKS");
    return n != nullptr && std::atoi(n) > 1;
  }
  return false;
}

std::string RandomToken() {
  std::random_device device;
  std::string token;
  static const char* digits = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += digits[device() & 15];
  return token;
}

bool LaunchResult::ok() const {
  if (timed_out) return false;
  for (const RankExit& e : exits) {
    if (e.signaled || e.exit_code != 0) return false;
  }
  return true;
}

std::string LaunchResult::Describe(double timeout_seconds) const {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (timed_out) add("ranks still running after " + std::to_string(timeout_seconds) + " s were killed");
  for (const RankExit& e : exits) {
    const std::string who = "rank " + std::to_string(e.rank);
    if (e.killed_by_launcher) {
      if (!timed_out) add(who + " killed after another rank failed");
    } else if (e.signaled) {
      add(who + " died of signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")");
    } else if (e.exit_code != 0) {
      add(who + " exited with status " + std::to_string(e.exit_code));
    }
  }
  return out;
}

Result<LaunchResult> LaunchLocalRanks(const LaunchOptions& options) {
  if (options.ranks < 1) return InvalidArgument("local launch needs at least one rank");
  if (options.ranks > kMaxLocalRanks) {
    return InvalidArgument("local launch starts one process per rank on this machine: " +
                           std::to_string(options.ranks) + " ranks is over the limit of " +
                           std::to_string(kMaxLocalRanks) +
                           " (kMaxLocalRanks); run larger refits under a launcher across hosts");
  }
  if (options.argv.empty()) return InvalidArgument("local launch needs an argv");
  FERRY_ASSIGN_OR_RETURN(Listener probe, ListenTcp("127.0.0.1", 0));
  const int port = probe.port;
  ::close(probe.fd);

  std::vector<std::string> env_strings;
  env_strings.push_back("WORLD_SIZE=" + std::to_string(options.ranks));
  env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(options.ranks));
  env_strings.push_back("MASTER_ADDR=127.0.0.1");
  env_strings.push_back("MASTER_PORT=" + std::to_string(port));
  env_strings.push_back("FERRY_TOKEN=" + RandomToken());
  for (const auto& [k, v] : options.environment) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(options.ranks, -1);
  LaunchResult result;
  result.exits.resize(options.ranks);
  auto kill_all = [&](int signal) {
    for (int r = 0; r < options.ranks; ++r) {
      if (pids[r] > 0) ::kill(pids[r], signal);
    }
  };
  for (int r = 0; r < options.ranks; ++r) {
    result.exits[r].rank = r;
    std::vector<std::string> rank_env = env_strings;
    rank_env.push_back("RANK=" + std::to_string(r));
    rank_env.push_back("LOCAL_RANK=" + std::to_string(r));
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string error = std::strerror(errno);
      kill_all(SIGKILL);
      for (pid_t p : pids) {
        if (p > 0) ::waitpid(p, nullptr, 0);
      }
      return Unavailable("local launch: fork for rank " + std::to_string(r) + ": " + error);
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
      for (const std::string& e : rank_env) ::putenv(const_cast<char*>(e.c_str()));
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "rank %d: exec %s: %s\n", r, argv[0], std::strerror(errno));
      ::_exit(127);
    }
    pids[r] = pid;
  }

  const Deadline deadline = Deadline::AfterSeconds(options.timeout_seconds);
  Deadline grace = Deadline::AfterSeconds(1e9);
  bool failed = false;
  int running = options.ranks;
  while (running > 0) {
    bool reaped = false;
    for (int r = 0; r < options.ranks; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      reaped = true;
      pids[r] = -1;
      --running;
      RankExit& e = result.exits[r];
      TraceExit(r);
      if (WIFSIGNALED(status)) {
        e.signaled = true;
        e.signal = WTERMSIG(status);
      } else {
        e.exit_code = WEXITSTATUS(status);
      }
      if ((e.signaled || e.exit_code != 0) && !e.killed_by_launcher && !failed) {
        failed = true;
        grace = Deadline::AfterSeconds(options.failure_grace_seconds);
      }
    }
    if (running == 0) break;
    const bool timeout = deadline.Expired();
    if (timeout || (failed && grace.Expired())) {
      result.timed_out = timeout && !failed;
      for (int r = 0; r < options.ranks; ++r) {
        if (pids[r] > 0) result.exits[r].killed_by_launcher = true;
      }
      kill_all(SIGKILL);
      for (int r = 0; r < options.ranks; ++r) {
        if (pids[r] <= 0) continue;
        int status = 0;
        ::waitpid(pids[r], &status, 0);
        TraceExit(r);
        result.exits[r].signaled = WIFSIGNALED(status);
        result.exits[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        pids[r] = -1;
      }
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

}  // namespace ferry::cli
