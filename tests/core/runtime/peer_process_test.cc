// PeerProcesses binds each same-node peer rank to the process the kernel names at the other end of
// an authenticated Unix socket: ranks as threads of one process, a rank in a child process (bound
// to the child's pid, whatever it could claim), an impostor without the epoch's secret (refused),
// and a verified process that exits (CheckAlive names the rank).
#include "core/runtime/peer_process.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace ferry {
namespace {

PeerProcessOptions Options(int rank, std::vector<int> peers, const std::string& secret,
                           const std::string& name) {
  PeerProcessOptions o;
  o.rank = rank;
  o.size = 3;
  o.epoch = 4;
  o.secret = secret;
  o.socket_name = "ferry-test/" + std::to_string(::getpid()) + "/" + name;
  o.peers = std::move(peers);
  return o;
}

// Runs `rank`'s side in a child process that exits 0 when it connected; the parent kills it if
// it is still running when the test is done with it.
pid_t ChildRank(PeerProcessOptions options) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(20);  // the child's own deadline
    auto connected = PeerProcesses::Connect(std::move(options), Deadline::AfterSeconds(10));
    ::_exit(connected.ok() ? 0 : 1);
  }
  return child;
}

int Reap(pid_t child) {
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

TEST(PeerProcessTest, RanksAsThreadsOfOneProcessVerifyEachOther) {
  std::vector<std::unique_ptr<PeerProcesses>> ranks(3);
  std::vector<Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> peers;
      for (int p = 0; p < 3; ++p) {
        if (p != r) peers.push_back(p);
      }
      auto connected = PeerProcesses::Connect(Options(r, peers, "s", "threads"), Deadline::AfterSeconds(10));
      status[r] = connected.status();
      if (connected.ok()) ranks[r] = std::move(*connected);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r].ToString();
    for (int p = 0; p < 3; ++p) {
      if (p == r) {
        EXPECT_EQ(ranks[r]->Pid(p).status().code(), StatusCode::kFailedPrecondition);
        continue;
      }
      auto pid = ranks[r]->Pid(p);
      ASSERT_TRUE(pid.ok()) << pid.status().ToString();
      EXPECT_EQ(*pid, ::getpid());
      EXPECT_TRUE(ranks[r]->CheckAlive(p).ok());
    }
  }
}

TEST(PeerProcessTest, AChildRankIsBoundToItsOwnPidAndItsExitIsSeen) {
  const pid_t child = ChildRank(Options(0, {1}, "s", "child"));
  ASSERT_GT(child, 0);
  auto rank1 = PeerProcesses::Connect(Options(1, {0}, "s", "child"), Deadline::AfterSeconds(10));
  if (!rank1.ok()) Reap(child);
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  auto pid = (*rank1)->Pid(0);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(*pid, child);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Status alive = (*rank1)->CheckAlive(0);
  EXPECT_EQ(alive.code(), StatusCode::kUnavailable);
  EXPECT_NE(alive.message().find("rank 0's process " + std::to_string(child) + " exited"), std::string::npos)
      << alive.ToString();
}

TEST(PeerProcessTest, AnImpostorWithoutTheSecretIsNeverBound) {
  const pid_t impostor = ChildRank(Options(0, {1}, "guessed", "impostor"));
  ASSERT_GT(impostor, 0);
  auto rank1 = PeerProcesses::Connect(Options(1, {0}, "s", "impostor"), Deadline::AfterSeconds(2));
  const int status = Reap(impostor);
  ASSERT_FALSE(rank1.ok());
  EXPECT_EQ(rank1.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(rank1.status().message().find("peer 0 did not prove its rank"), std::string::npos)
      << rank1.status().ToString();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "the impostor was not told it failed";
}

}  // namespace
}  // namespace ferry
