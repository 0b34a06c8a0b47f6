// `ferry store` with the real binary: it serves a job of five `ferry run` ranks started as a user's
// launcher would start them (RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT, FERRY_TOKEN and
// FERRY_STORE_EXTERNAL=1, no rank hosting the store), the refit verifies, and SIGTERM stops it
// with exit 0; without FERRY_TOKEN it refuses to start. Every process has a deadline and is
// killed at it; everything listens on 127.0.0.1.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// tools/cli/ferry started with `args` and `env` ("NAME=value", added to this process's), its
// output in a log under TEST_TMPDIR. Killed when destroyed if still running.
class Ferry {
 public:
  Ferry(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    static int counter = 0;
    log_ = std::string(std::getenv("TEST_TMPDIR")) + "/ferry-store-" + std::to_string(counter++) + ".log";
    std::vector<std::string> argv = {"tools/cli/ferry"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ != 0) return;
    std::FILE* out = std::freopen(log_.c_str(), "w", stdout);
    if (out == nullptr) ::_exit(126);
    ::dup2(::fileno(stdout), 2);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ~Ferry() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  // The exit status once it exited within `seconds`; -1 when it did not (it is then killed).
  int Wait(double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Signal(int signal) { ::kill(pid_, signal); }

  std::string Output() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // The port of a `ferry store` from its first line, waiting up to `seconds`; -1 when none came.
  int ServingPort(double seconds) const {
    const std::string serving = "serving on 127.0.0.1:";
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
      const std::string out = Output();
      const size_t at = out.find(serving);
      if (at != std::string::npos) return std::atoi(out.c_str() + at + serving.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

TEST(CmdStoreTest, ServesAJobWhoseRanksConnectToIt) {
  const std::string token = "FERRY_TOKEN=store-test-token";
  Ferry store({"store", "--port", "0", "--bind", "127.0.0.1"}, {token});
  const int port = store.ServingPort(20);
  ASSERT_GT(port, 0) << store.Output();
  std::vector<std::unique_ptr<Ferry>> ranks;
  for (int r = 0; r < 5; ++r) {
    ranks.push_back(std::make_unique<Ferry>(
        std::vector<std::string>{"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml", "--dst-layout",
                                 "tests/tools/cli/testdata/uneven_dst.yaml", "--transport", "tcp", "--verify",
                                 "--iterations", "2", "--timeout", "60"},
        std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=5", "LOCAL_RANK=" + std::to_string(r),
                                 "LOCAL_WORLD_SIZE=5", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                                 token, "FERRY_STORE_EXTERNAL=1", "FERRY_TCP_ADDRESS=127.0.0.1"}));
  }
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(ranks[r]->Wait(90), 0) << "rank " << r << ":\n" << ranks[r]->Output();
  }
  EXPECT_NE(ranks[0]->Output().find("bit-exact"), std::string::npos) << ranks[0]->Output();
  store.Signal(SIGTERM);
  EXPECT_EQ(store.Wait(20), 0) << store.Output();
  EXPECT_NE(store.Output().find("stopped by SIGTERM"), std::string::npos) << store.Output();
}

TEST(CmdStoreTest, RefusesToServeWithoutAToken) {
  ::unsetenv("FERRY_TOKEN");
  Ferry store({"store", "--port", "0", "--bind", "127.0.0.1"}, {});
  EXPECT_EQ(store.Wait(20), 1) << store.Output();
  EXPECT_NE(store.Output().find("FERRY_TOKEN is not set"), std::string::npos) << store.Output();
}

}  // namespace
