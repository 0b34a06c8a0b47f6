// Session: forked processes that join from torchrun-style environment variables and a YAML file,
// run a plan over tcp and finish together.
#include "core/runtime/session.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "core/runtime/socket_util.h"
#include "core/runtime/tcp_store.h"

namespace ferry {
namespace {

TEST(SessionTest, TwoProcessesJoinFromTheEnvironmentAndRunAPlan) {
  auto probe = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  int port = probe->port;
  ::close(probe->fd);
  std::string yaml = std::string(std::getenv("TEST_TMPDIR")) + "/session.yaml";
  // Same host, so intra_node carries the traffic; the file sets it to local, the environment
  // overrides it back to tcp.
  std::ofstream(yaml) << "transport:\n  intra_node: local\ntcp:\n  address: 127.0.0.1\n"
                         "executor:\n  max_in_flight: 7\n";
  const int64_t bytes = 1 << 20;
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "s", bytes}};
  plan.destination_buffers = {{1, "d", bytes}};
  Op send;
  send.kind = OpKind::kSend;
  send.rank = 0;
  send.peer = 1;
  send.message = 1;
  send.bytes = bytes;
  send.SetData(ByteRange(Space::kSource, 0, 0, bytes));
  plan.AddOp(send);
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 1;
  recv.peer = 0;
  recv.SetData(ByteRange(Space::kDestination, 0, 0, bytes));
  plan.AddOp(recv);

  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(60);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("FERRY_TOKEN", "session-test", 1);
      ::setenv("FERRY_DEADLINE_CONNECT", "20s", 1);
      ::setenv("FERRY_TRANSPORT_INTRA_NODE", "tcp", 1);
      auto session = Session::JoinFromEnvironment(yaml);
      if (!session.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, session.status().ToString().c_str());
        ::_exit(1);
      }
      Session& s = **session;
      if (s.communicator().TransportNameFor(1 - rank) != "tcp") ::_exit(2);
      if (*s.config().GetInt("executor.max_in_flight") != 7 || s.info().launcher != "torchrun") {
        ::_exit(6);
      }
      std::vector<uint8_t> source(bytes, 0x3C), destination(bytes, 0);
      RankMemory memory;
      memory.source = {{source.data(), bytes, MemoryKind::kHost, -1}};
      memory.destination = {{destination.data(), bytes, MemoryKind::kHost, -1}};
      auto stats = s.executor().Run(plan, memory, Deadline::AfterSeconds(20));
      if (!stats.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, stats.status().ToString().c_str());
        ::_exit(3);
      }
      if (rank == 1 && destination != source) ::_exit(4);
      ::_exit(s.Finish().ok() ? 0 : 5);
    }
    children.push_back(pid);
  }
  std::vector<int> codes;
  Deadline deadline = Deadline::AfterSeconds(60);
  for (pid_t pid : children) {
    int status = -1;
    while (::waitpid(pid, &status, WNOHANG) == 0 && !deadline.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (deadline.Expired()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// A one-rank session joined over 127.0.0.1 at `port`; `external`: a store process serves it.
Result<std::unique_ptr<Session>> JoinAlone(int port, bool external) {
  BootstrapInfo info;
  info.rank = 0;
  info.size = 1;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "session-test";
  info.store_external = external;
  Config config = RuntimeConfig();
  FERRY_RETURN_IF_ERROR(config.Set("tcp.address", "127.0.0.1"));
  FERRY_RETURN_IF_ERROR(config.Set("deadline.connect", "10s"));
  return Session::Join(info, std::move(config));
}

TEST(SessionTest, RankZeroHostingTheStoreGetsTheRecoveryNoticeOnce) {
  auto probe = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int port = probe->port;
  ::close(probe->fd);
  auto session = JoinAlone(port, /*external=*/false);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const std::string notice = (*session)->TakeRecoveryNotice();
  EXPECT_NE(notice.find("rank 0 hosts the store"), std::string::npos) << notice;
  EXPECT_NE(notice.find("cannot be replaced"), std::string::npos) << notice;
  EXPECT_NE(notice.find("FERRY_STORE_EXTERNAL=1"), std::string::npos) << notice;
  EXPECT_EQ((*session)->TakeRecoveryNotice(), "");
}

TEST(SessionTest, WithAnExternalStoreThereIsNoRecoveryNotice) {
  auto store = TcpStoreServer::Start("127.0.0.1", 0, "session-test");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto session = JoinAlone((*store)->port(), /*external=*/true);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ((*session)->TakeRecoveryNotice(), "");
}

// Bootstrap values and deadlines a caller gets wrong are refused before anything waits: a rank
// outside the world used to wait out deadline.connect for a store nobody served, and a bad
// deadline.abort was only read (and replaced by 5 s) when an abort ran.
TEST(SessionTest, BadBootstrapInfoAndDeadlinesAreRefusedAtOnceNamingTheField) {
  struct Case {
    const char* what;
    int rank, size, port;
    const char* option;
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"rank past the world", 3, 2, 29500, nullptr, nullptr, "rank 3 is not in [0, 2)"},
      {"negative rank", -1, 2, 29500, nullptr, nullptr, "rank -1 is not in [0, 2)"},
      {"empty world", 0, 0, 29500, nullptr, nullptr, "world size 0 is not in [1, 131072]"},
      {"port past 65535", 0, 1, 99999, nullptr, nullptr, "store port 99999 is not in [1, 65535]"},
      {"zero abort deadline", 0, 1, 29500, "deadline.abort", "0s",
       "option 'deadline.abort' is 0.000000 s; it must be above zero"},
      {"negative store deadline", 0, 1, 29500, "deadline.store", "-1s",
       "option 'deadline.store': '-1s' is not a duration"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    BootstrapInfo info;
    info.rank = c.rank;
    info.size = c.size;
    info.local_size = c.size < 1 ? 1 : c.size;
    info.store_host = "127.0.0.1";
    info.store_port = c.port;
    info.token = "session-test";
    Config config = RuntimeConfig();
    ASSERT_TRUE(config.Set("deadline.connect", "30s").ok());
    if (c.option != nullptr) {
      ASSERT_TRUE(config.Set(c.option, c.value).ok());
    }
    const auto start = std::chrono::steady_clock::now();
    auto session = Session::Join(info, std::move(config));
    ASSERT_FALSE(session.ok());
    EXPECT_EQ(session.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(session.status().message().find(c.expected), std::string::npos)
        << session.status().ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

}  // namespace
}  // namespace ferry
