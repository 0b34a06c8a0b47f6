// Stores: the in-memory store, and the TCP store's token check, waits and deadlines.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/runtime/socket_util.h"
#include "tests/core/runtime/handshake_replay_testutil.h"
#include "core/runtime/store.h"
#include "core/runtime/tcp_store.h"

namespace ferry {
namespace {

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(InMemoryStoreTest, GetWaitsForSetAndTimesOut) {
  InMemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(store.Set("k", B("v"), Deadline::AfterSeconds(1)).ok());
  });
  auto value = store.Get("k", Deadline::AfterSeconds(5));
  setter.join();
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, B("v"));
  auto missing = store.Get("never", Deadline::AfterSeconds(0.05));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(InMemoryStoreTest, BarrierAndClose) {
  InMemoryStore store;
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&] { ok += Barrier(store, "b", 4, Deadline::AfterSeconds(5)).ok(); });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(Barrier(store, "short", 2, Deadline::AfterSeconds(0.05)).code(),
            StatusCode::kDeadlineExceeded);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.Close();
  });
  EXPECT_EQ(store.Get("x", Deadline::AfterSeconds(10)).status().code(), StatusCode::kAborted);
  closer.join();
}

TEST(InMemoryStoreTest, FinalBarrierOfOneRankReturnsAtOnce) {
  InMemoryStore store;
  EXPECT_TRUE(FinalBarrier(store, "alone", 0, 1, 0, Deadline::AfterSeconds(5)).ok());
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Fires `interrupt` with `reason` after `delay` on a thread of its own; joined on destruction.
struct FireLater {
  FireLater(StoreInterrupt& interrupt, Status reason, std::chrono::milliseconds delay)
      : thread([&interrupt, reason, delay] {
          std::this_thread::sleep_for(delay);
          interrupt.Fire(reason);
        }) {}
  ~FireLater() { thread.join(); }
  std::thread thread;
};

// Waits with a 30 s deadline end within a second of the interrupt, with its reason; an interrupt
// that already fired ends a wait at once; the store keeps serving everything else.
void ExpectInterruptsEndWaits(Store& store) {
  StoreInterrupt interrupt;
  auto start = std::chrono::steady_clock::now();
  {
    FireLater fire(interrupt, Unavailable("rank 3 died (test)"), std::chrono::milliseconds(50));
    Status waited = store.WaitAtLeast("never", 1, Deadline::AfterSeconds(30), &interrupt);
    EXPECT_LT(SecondsSince(start), 1.0);
    EXPECT_EQ(waited.code(), StatusCode::kUnavailable) << waited.ToString();
    EXPECT_NE(waited.message().find("rank 3 died"), std::string::npos) << waited.ToString();
  }
  start = std::chrono::steady_clock::now();
  auto got = store.Get("never", Deadline::AfterSeconds(30), &interrupt);
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_NE(got.status().message().find("rank 3 died"), std::string::npos) << got.status().ToString();
  StoreInterrupt idle;  // never fires: the store answers as usual
  EXPECT_EQ(*store.Add("n", 2, Deadline::AfterSeconds(5)), 2);
  EXPECT_TRUE(store.WaitAtLeast("n", 2, Deadline::AfterSeconds(5), &idle).ok());
  ASSERT_TRUE(store.Set("k", B("v"), Deadline::AfterSeconds(5)).ok());
  auto value = store.Get("k", Deadline::AfterSeconds(5), &idle);
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, B("v"));
  EXPECT_EQ(store.Get("absent", Deadline::AfterSeconds(0.05), &idle).status().code(),
            StatusCode::kDeadlineExceeded);
}

TEST(InMemoryStoreTest, AnInterruptEndsWaitsAtOnceAndTheStoreStaysUsable) {
  InMemoryStore store;
  ExpectInterruptsEndWaits(store);
}

TEST(TcpStoreTest, AnInterruptEndsWaitsAtOnceAndTheClientReconnects) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  auto client = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ExpectInterruptsEndWaits(**client);
}

// A wait cut short leaves no worker behind: the server notices the dropped connection within its
// hangup check and frees the slot (here the only one), where it would otherwise hold it for the
// wait's 30 s; the client's next request reconnects into that slot.
TEST(TcpStoreTest, AnInterruptedWaitFreesItsServerSlot) {
  StoreServerLimits limits;
  limits.max_connections = 1;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok", limits);
  ASSERT_TRUE(server.ok());
  auto client = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(client.ok());
  StoreInterrupt interrupt;
  {
    FireLater fire(interrupt, Aborted("test abort"), std::chrono::milliseconds(50));
    EXPECT_EQ((*client)->WaitAtLeast("never", 1, Deadline::AfterSeconds(30), &interrupt).code(),
              StatusCode::kAborted);
  }
  const auto start = std::chrono::steady_clock::now();
  while ((*server)->active() > 0 && SecondsSince(start) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LT(SecondsSince(start), 1.0) << "the server kept the abandoned wait's worker";
  auto added = (*client)->Add("n", 1, Deadline::AfterSeconds(5));
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(*added, 1);
  EXPECT_EQ((*server)->active(), 1);
  EXPECT_EQ((*server)->rejected(), 0);
}

// A request waiting for its turn behind another thread's long wait is interrupted too; Close ends
// the long wait itself at once.
TEST(TcpStoreTest, InterruptsAndCloseEndRequestsWaitingForTheirTurn) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  auto client = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(client.ok());
  Status long_wait;
  std::thread holder([&] { long_wait = (*client)->WaitAtLeast("never", 1, Deadline::AfterSeconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the holder owns the connection
  StoreInterrupt interrupt;
  auto start = std::chrono::steady_clock::now();
  {
    FireLater fire(interrupt, Aborted("queued wait interrupted"), std::chrono::milliseconds(50));
    auto got = (*client)->Get("k", Deadline::AfterSeconds(30), &interrupt);
    EXPECT_NE(got.status().message().find("queued wait interrupted"), std::string::npos)
        << got.status().ToString();
  }
  EXPECT_LT(SecondsSince(start), 1.0);
  start = std::chrono::steady_clock::now();
  (*client)->Close();
  holder.join();
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(long_wait.code(), StatusCode::kAborted) << long_wait.ToString();
}

TEST(TcpStoreTest, ClientsWithTheTokenShareValuesAndCounters) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  int port = (*server)->port();
  auto a = TcpStoreClient::Connect("127.0.0.1", port, "s3cret", Deadline::AfterSeconds(5));
  auto b = TcpStoreClient::Connect("127.0.0.1", port, "s3cret", Deadline::AfterSeconds(5));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE((*a)->Set("ep/1", B("hello"), Deadline::AfterSeconds(5)).ok());
  });
  auto got = (*b)->Get("ep/1", Deadline::AfterSeconds(5));
  later.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, B("hello"));
  EXPECT_EQ(*(*a)->Add("n", 2, Deadline::AfterSeconds(5)), 2);
  EXPECT_EQ(*(*b)->Add("n", 3, Deadline::AfterSeconds(5)), 5);
  EXPECT_TRUE((*a)->WaitAtLeast("n", 5, Deadline::AfterSeconds(5)).ok());
  auto timeout = (*b)->Get("never", Deadline::AfterSeconds(0.1));
  EXPECT_EQ(timeout.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*server)->rejected(), 0);
}

TEST(TcpStoreTest, RejectsWrongOrMissingToken) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  auto wrong = TcpStoreClient::Connect("127.0.0.1", port, "guess", Deadline::AfterSeconds(5));
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(wrong.status().message().find("FERRY_TOKEN"), std::string::npos);
  // A raw connection that answers the challenge with a request instead of a hello is dropped,
  // never answered.
  auto raw = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(5));
  ASSERT_TRUE(raw.ok());
  uint8_t challenge[20];
  ASSERT_TRUE(ReadAll(*raw, challenge, sizeof(challenge), Deadline::AfterSeconds(5)).ok());
  EXPECT_EQ(std::string(challenge, challenge + 4), "FRYS");
  uint8_t junk[kStoreHelloBytes] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 'k', 'e', 'y'};
  ASSERT_TRUE(WriteAll(*raw, junk, sizeof(junk), Deadline::AfterSeconds(5)).ok());
  uint8_t reply = 0;
  Status read = ReadAll(*raw, &reply, 1, Deadline::AfterSeconds(5));
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << "the server must close the connection";
  ::close(*raw);
  for (int i = 0; i < 100 && (*server)->rejected() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*server)->rejected(), 2);
  EXPECT_FALSE(TcpStoreServer::Start("127.0.0.1", 0, "").ok());
}

// A sniffer that recorded a real client's handshake can replay neither half: the store sends a
// fresh challenge (the recorded hello's MAC no longer verifies) and the client draws a fresh
// nonce (a fake store's recorded ack no longer verifies).
TEST(TcpStoreTest, ARecordedHandshakeDoesNotReplay) {
  using testing::HandshakeRecorder;
  using testing::ReplayHelloTo;
  using testing::ReplayingListener;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "job-token");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  HandshakeRecorder recorder((*server)->port(), kStoreHelloBytes, 32);
  auto real = TcpStoreClient::Connect("127.0.0.1", recorder.port(), "job-token", Deadline::AfterSeconds(5));
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  auto recorded = recorder.Wait();
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  EXPECT_FALSE(ReplayHelloTo((*server)->port(), *recorded)) << "the store accepted a replayed hello";
  ReplayingListener fake(*recorded);
  auto fooled = TcpStoreClient::Connect("127.0.0.1", fake.port(), "job-token", Deadline::AfterSeconds(5));
  ASSERT_FALSE(fooled.ok()) << "a client accepted a replayed store";
  EXPECT_NE(fooled.status().message().find("without proof of the token"), std::string::npos)
      << fooled.status().ToString();
}

// The job secret the ranks key everything with comes from the token on each client and never
// from the store's traffic: equal for clients of one token, different for another token, and
// not the token itself; every in-process store has its own.
TEST(TcpStoreTest, TheJobSecretDerivesFromTheTokenNotFromTheWire) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  auto a = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "tok", Deadline::AfterSeconds(5));
  auto b = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->JobSecret(), (*b)->JobSecret());
  EXPECT_EQ((*a)->JobSecret().size(), 32u);
  EXPECT_EQ((*a)->JobSecret().find("tok"), std::string::npos);
  auto other = TcpStoreServer::Start("127.0.0.1", 0, "other");
  ASSERT_TRUE(other.ok());
  auto c = TcpStoreClient::Connect("127.0.0.1", (*other)->port(), "other", Deadline::AfterSeconds(5));
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*a)->JobSecret(), (*c)->JobSecret());
  InMemoryStore one, two;
  EXPECT_NE(one.JobSecret(), two.JobSecret());
  EXPECT_FALSE(one.JobSecret().empty());
}

// A stopped store host (SIGSTOP of the process that serves it): requests fail within the
// client's reply grace, naming the store, instead of waiting out their deadlines; the connection
// is then unusable rather than out of step.
TEST(TcpStoreTest, AStoppedStoreHostFailsRequestsWithinTheReplyGrace) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t host = ::fork();
  if (host == 0) {
    ::alarm(30);
    auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok");
    const int port = server.ok() ? (*server)->port() : -1;
    (void)!::write(ready[1], &port, sizeof(port));
    while (true) ::pause();
  }
  struct KillOnExit {  // a stopped child ignores its alarm: it must be killed on every path
    pid_t pid;
    ~KillOnExit() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{host};
  int port = -1;
  ASSERT_EQ(::read(ready[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  auto client = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(5),
                                        std::chrono::milliseconds(500));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", B("v"), Deadline::AfterSeconds(5)).ok());
  ::kill(host, SIGSTOP);
  int stopped = 0;
  ASSERT_EQ(::waitpid(host, &stopped, WUNTRACED), host);
  ASSERT_TRUE(WIFSTOPPED(stopped));
  const auto start = std::chrono::steady_clock::now();
  auto added = (*client)->Add("n", 1, Deadline::AfterSeconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Status later = (*client)->WaitAtLeast("n", 1, Deadline::AfterSeconds(60));
  ::close(ready[0]);
  ::close(ready[1]);
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(added.status().message().find("no reply from the store 127.0.0.1:" + std::to_string(port)),
            std::string::npos) << added.status().ToString();
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 1.5);
  EXPECT_FALSE(later.ok()) << "a request after a lost reply must not read that reply";
}

// Entries of a /proc directory: open file descriptors or threads of this process.
int CountEntries(const char* dir) {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++count;
  return count;
}

// Waits (up to 5 s) until this process's fds and threads are back to `fds`/`tasks`.
bool BackToBaseline(int fds, int tasks) {
  for (int i = 0; i < 500; ++i) {
    if (CountEntries("/proc/self/fd") <= fds && CountEntries("/proc/self/task") <= tasks) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A bounded flood on loopback, half silent connections and half garbage, while four real ranks
// join and meet at a barrier: they all get in, the flood is refused, and the server's sockets
// and threads return to what they were before the flood.
TEST(TcpStoreTest, SurvivesAFloodAndReturnsToBaseline) {
  StoreServerLimits limits;
  limits.max_pending = 16;
  limits.hello_timeout = std::chrono::milliseconds(500);
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok", limits);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  const int fds_before = CountEntries("/proc/self/fd");
  const int tasks_before = CountEntries("/proc/self/task");
  std::vector<int> flood;
  for (int i = 0; i < 200; ++i) {
    auto fd = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(5));
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    if (i % 2 == 0) {
      uint8_t garbage[64];
      for (int b = 0; b < 64; ++b) garbage[b] = static_cast<uint8_t>(i * 31 + b);
      ::send(*fd, garbage, sizeof(garbage), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    flood.push_back(*fd);
  }
  std::vector<Status> joined(4, Unavailable("not run"));
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      auto client = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(10));
      if (!client.ok()) {
        joined[r] = client.status();
        return;
      }
      joined[r] = Barrier(**client, "joined", 4, Deadline::AfterSeconds(10));
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(joined[r].ok()) << "rank " << r << ": " << joined[r].ToString();
  for (int fd : flood) ::close(fd);
  EXPECT_GE((*server)->rejected(), 100);
  bool baseline = BackToBaseline(fds_before, tasks_before);
  std::printf("flood: fds %d before, %d after; threads %d before, %d after; %d refused\n",
              fds_before, CountEntries("/proc/self/fd"), tasks_before,
              CountEntries("/proc/self/task"), (*server)->rejected());
  EXPECT_TRUE(baseline) << "fds or threads did not return to their baseline";
  EXPECT_EQ((*server)->active(), 0);
}

// Authenticated connections beyond the cap are refused; one that closes is reaped, making room.
TEST(TcpStoreTest, CapsAuthenticatedConnectionsAndReapsClosedOnes) {
  StoreServerLimits limits;
  limits.max_connections = 2;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "tok", limits);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  auto a = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(5));
  auto b = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Set("k", B("v"), Deadline::AfterSeconds(5)).ok());
  ASSERT_TRUE((*b)->Get("k", Deadline::AfterSeconds(5)).ok());
  auto c = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(c.ok());  // the handshake passes; the server then closes it (over the cap)
  EXPECT_FALSE((*c)->Get("k", Deadline::AfterSeconds(2)).ok());
  a->reset();
  for (int i = 0; i < 200 && (*server)->active() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto d = TcpStoreClient::Connect("127.0.0.1", port, "tok", Deadline::AfterSeconds(5));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->Get("k", Deadline::AfterSeconds(5)).ok());
}

TEST(TcpStoreTest, ConnectToNobodyFailsAtTheDeadline) {
  auto listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  int port = listener->port;
  ::close(listener->fd);
  auto started = std::chrono::steady_clock::now();
  auto client = TcpStoreClient::Connect("127.0.0.1", port, "t", Deadline::AfterSeconds(0.3));
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
}

}  // namespace
}  // namespace ferry
