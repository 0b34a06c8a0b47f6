// Local launch of one process per rank with a deadline; children never outlive the launcher.
#include "tools/cli/local_launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string_view>
#include <thread>

#include "core/base/deadline.h"
#include "core/runtime/socket_util.h"
#include "core/runtime/tcp_store.h"

extern char** environ;

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

// How one process ended: "died of signal 9 (Killed)" or "exited with status 1".
std::string HowItEnded(const RankExit& e) {
  if (e.signaled) return "died of signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
  return "exited with status " + std::to_string(e.exit_code);
}

std::string LaunchResult::Describe(double timeout_seconds) const {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (timed_out) add("ranks still running after " + std::to_string(timeout_seconds) + " s were killed");
  if (replacement_limit_reached > 0) {
    add("a failed rank was not replaced: all " + std::to_string(replacement_limit_reached) +
        " replacements allowed were used");
  }
  for (const RankExit& e : exits) {
    const std::string who = "rank " + std::to_string(e.rank);
    if (e.killed_by_launcher) {
      if (!timed_out) add(who + " killed after another rank failed");
    } else if (e.signaled || e.exit_code != 0) {
      add(who + " " + HowItEnded(e));
    }
  }
  return out;
}

namespace {

// The variable name of "NAME=value".
std::string_view NameOf(const std::string& entry) {
  return std::string_view(entry).substr(0, entry.find('='));
}

// This process's environment with `overrides` ("NAME=value") replacing entries of the same name.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const std::string& o) { return NameOf(o) == NameOf(entry); });
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// The processes of one launch and what the children share.
class Launch {
 public:
  // `port`: the store's; `store_external`: the launcher serves it (else rank 0 does).
  Launch(const LaunchOptions& options, int port, const std::string& token, bool store_external)
      : options_(options), pids_(options.ranks, -1) {
    env_.push_back("WORLD_SIZE=" + std::to_string(options.ranks));
    env_.push_back("LOCAL_WORLD_SIZE=" + std::to_string(options.ranks));
    env_.push_back("MASTER_ADDR=127.0.0.1");
    env_.push_back("MASTER_PORT=" + std::to_string(port));
    // Over any store address this process inherited (those take precedence over MASTER_*).
    env_.push_back("FERRY_STORE_ADDR=127.0.0.1");
    env_.push_back("FERRY_STORE_PORT=" + std::to_string(port));
    env_.push_back("FERRY_TOKEN=" + token);
    env_.push_back(std::string("FERRY_STORE_EXTERNAL=") + (store_external ? "1" : "0"));
    for (const auto& [k, v] : options.environment) env_.push_back(k + "=" + v);
    for (const std::string& a : options.argv) argv_.push_back(const_cast<char*>(a.c_str()));
    argv_.push_back(nullptr);
    result_.exits.resize(options.ranks);
    for (int r = 0; r < options.ranks; ++r) result_.exits[r].rank = r;
  }

  // Forks and execs rank `r` (as a replacement process when `replacement`). The child's
  // environment (this process's, with the launch's variables in place of any of the same name) is
  // built here, before fork: between fork and exec the child only makes system calls.
  Status Spawn(int r, bool replacement) {
    std::vector<std::string> rank_env = env_;
    rank_env.push_back("RANK=" + std::to_string(r));
    rank_env.push_back("LOCAL_RANK=" + std::to_string(r));
    rank_env.push_back(std::string("FERRY_REPLACEMENT=") + (replacement ? "1" : "0"));
    const std::vector<std::string> env = ChildEnvironment(rank_env);
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const std::string exec_failed = "rank " + std::to_string(r) + ": exec " + argv_[0] + " failed\n";
    const pid_t pid = ::fork();
    if (pid < 0) return Unavailable("local launch: fork for rank " + std::to_string(r) + ": " + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent_) ::_exit(127);  // the launcher died before prctl
      ::execve("/proc/self/exe", argv_.data(), envp.data());
      (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      ::_exit(127);
    }
    pids_[r] = pid;
    ++running_;
    return Status::Ok();
  }

  // Kills every running child with SIGKILL and reaps it (marked killed by the launcher).
  void KillAll() {
    for (int r = 0; r < options_.ranks; ++r) {
      if (pids_[r] > 0) ::kill(pids_[r], SIGKILL);
    }
    for (int r = 0; r < options_.ranks; ++r) {
      if (pids_[r] <= 0) continue;
      int status = 0;
      ::waitpid(pids_[r], &status, 0);
      TraceExit(r);
      RankExit& e = result_.exits[r];
      e.killed_by_launcher = true;
      e.signaled = WIFSIGNALED(status);
      e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pids_[r] = -1;
      --running_;
    }
  }

  // Reaps the children that ended; returns whether any did. A failed rank is replaced when the
  // options allow it, else it starts the grace period of the others.
  Result<bool> Reap() {
    bool reaped = false;
    for (int r = 0; r < options_.ranks; ++r) {
      int status = 0;
      if (pids_[r] <= 0 || ::waitpid(pids_[r], &status, WNOHANG) != pids_[r]) continue;
      reaped = true;
      pids_[r] = -1;
      --running_;
      TraceExit(r);
      RankExit e{.rank = r};
      e.signaled = WIFSIGNALED(status);
      e.signal = e.signaled ? WTERMSIG(status) : 0;
      e.exit_code = e.signaled ? 0 : WEXITSTATUS(status);
      result_.exits[r] = e;
      if (!e.signaled && e.exit_code == 0) {
        ++finished_;
        continue;
      }
      FERRY_RETURN_IF_ERROR(Failed(e));
    }
    return reaped;
  }

  // A rank's process failed: its replacement starts when the options allow it and the job can
  // still take one, else the grace period of the others begins.
  Status Failed(const RankExit& e) {
    // A replacement is for a process that died of a signal (killed, crashed): one that exited with
    // an error reported a failure of the job, which its replacement would meet again. It joins
    // running ranks: not after one finished the job, not after a failure that ends it, and not
    // for rank 0 when its process hosted the store.
    const bool replaceable = options_.replace_failed && e.signaled && !failed_ && finished_ == 0 &&
                             (options_.launcher_hosts_store || e.rank != 0);
    const int used = static_cast<int>(result_.replaced.size());
    if (replaceable && used < options_.max_replacements) {
      result_.replaced.push_back(e);
      std::printf("ferry run: launcher: rank %d %s; starting its replacement, %d of at most %d "
                  "(FERRY_REPLACEMENT=1)\n",
                  e.rank, HowItEnded(e).c_str(), used + 1, options_.max_replacements);
      std::fflush(stdout);
      return Spawn(e.rank, /*replacement=*/true);
    }
    if (replaceable) result_.replacement_limit_reached = options_.max_replacements;
    if (!failed_) {
      failed_ = true;
      grace_ = Deadline::AfterSeconds(options_.failure_grace_seconds);
    }
    return Status::Ok();
  }

  // Supervises until every child has ended, the deadline passes, or a failure's grace runs out.
  Result<LaunchResult> Supervise() {
    const Deadline deadline = Deadline::AfterSeconds(options_.timeout_seconds);
    while (running_ > 0) {
      Result<bool> reaped = Reap();
      if (!reaped.ok()) {
        KillAll();
        return reaped.status();
      }
      if (running_ == 0) break;
      const bool timeout = deadline.Expired();
      if (timeout || (failed_ && grace_.Expired())) {
        result_.timed_out = timeout && !failed_;
        KillAll();
        break;
      }
      if (!*reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return result_;
  }

 private:
  const LaunchOptions& options_;
  const pid_t parent_ = ::getpid();
  std::vector<std::string> env_;
  std::vector<char*> argv_;
  std::vector<pid_t> pids_;
  int running_ = 0;
  int finished_ = 0;  // ranks that exited 0
  bool failed_ = false;
  Deadline grace_ = Deadline::AfterSeconds(1e9);
  LaunchResult result_;
};

}  // namespace

Result<LaunchResult> LaunchLocalRanks(const LaunchOptions& options) {
  if (options.ranks < 1) return InvalidArgument("local launch needs at least one rank");
  if (options.ranks > kMaxLocalRanks) {
    return InvalidArgument("local launch starts one process per rank on this machine: " +
                           std::to_string(options.ranks) + " ranks is over the limit of " +
                           std::to_string(kMaxLocalRanks) +
                           " (kMaxLocalRanks); run larger refits under a launcher across hosts");
  }
  if (options.argv.empty()) return InvalidArgument("local launch needs an argv");
  if (options.max_replacements < 1 || options.max_replacements > kMaxReplacements) {
    return InvalidArgument("local launch: max_replacements must be from 1 to " + std::to_string(kMaxReplacements) +
                           " (kMaxReplacements), not " + std::to_string(options.max_replacements));
  }
  const std::string token = RandomToken();
  std::unique_ptr<TcpStoreServer> store;  // serves until every child has been reaped
  int port = 0;
  if (options.launcher_hosts_store) {
    auto started = TcpStoreServer::Start("127.0.0.1", 0, token);
    if (!started.ok()) return started.status().WithContext("local launch: starting the store");
    store = std::move(*started);
    port = store->port();
  } else {
    FERRY_ASSIGN_OR_RETURN(Listener probe, ListenTcp("127.0.0.1", 0));
    port = probe.port;
    ::close(probe.fd);
  }
  Launch launch(options, port, token, options.launcher_hosts_store);
  for (int r = 0; r < options.ranks; ++r) {
    if (Status spawned = launch.Spawn(r, /*replacement=*/false); !spawned.ok()) {
      launch.KillAll();
      return spawned;
    }
  }
  return launch.Supervise();
}

}  // namespace ferry::cli
