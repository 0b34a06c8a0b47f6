// The tcp transport authenticates every connection before accepting a byte: impostors that know a
// rank's address but not the communicator's secret (garbage, the old unauthenticated hello, a
// forged hello, another epoch's secret, silence) are refused while the real ranks connect and
// exchange a message.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "core/base/hmac.h"
#include "core/runtime/handshake.h"
#include "core/runtime/socket_util.h"
#include "tests/core/runtime/transport_conformance.h"
#include "core/runtime/rank_hello.h"
#include "tests/core/runtime/handshake_replay_testutil.h"

namespace ferry::testing {
namespace {

constexpr RankHelloProtocol kTcp{{'F', 'R', 'Y', 'T'}, "ferry-tcp"};

Result<std::unique_ptr<Transport>> MakeRank(const Config& config, int rank, uint64_t epoch,
                                            const std::string& secret) {
  TransportContext context;
  context.rank = rank;
  context.size = 2;
  context.epoch = epoch;
  context.config = &config;
  context.secret = secret;
  return TransportRegistry::Default().Create("tcp", context);
}

int PortOf(const Bytes& info) {
  std::string text(info.begin(), info.end());
  return std::atoi(text.substr(text.rfind(':') + 1).c_str());
}

// Connects to `port`, reads the challenge and sends what `hello` makes of its nonce (nothing for
// a silent impostor). Returns the socket, left open.
int Impostor(int port, const std::function<Bytes(const Nonce&)>& hello) {
  auto fd = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(5));
  if (!fd.ok()) return -1;
  uint8_t challenge[20];
  if (!ReadAll(*fd, challenge, sizeof(challenge), Deadline::AfterSeconds(5)).ok()) return *fd;
  Nonce nonce;
  std::memcpy(nonce.data(), challenge + 4, 16);
  Bytes bytes = hello(nonce);
  if (!bytes.empty()) (void)WriteAll(*fd, bytes.data(), static_cast<int64_t>(bytes.size()), Deadline::AfterSeconds(5));
  return *fd;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);

TEST(TcpAuthTest, ImpostorsAreRefusedAndRealRanksConnect) {
  Config config(RuntimeConfig());
  ASSERT_TRUE(config.Set("tcp.address", "127.0.0.1").ok());
  const std::string secret = "epoch-1-secret";
  TransportWorld world;
  for (int rank = 0; rank < 2; ++rank) {
    auto t = MakeRank(config, rank, 1, secret);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    world.ranks.push_back(std::move(*t));
  }
  Bytes info0 = *world.ranks[0]->LocalEndpointInfo();
  Bytes info1 = *world.ranks[1]->LocalEndpointInfo();
  int port = PortOf(info1);
  // The impostors connect while rank 1 waits for rank 0, before the real rank 0 does.
  std::vector<std::thread> impostors;
  std::vector<int> fds(5, -1);
  impostors.emplace_back([&] {
    fds[0] = Impostor(port, [](const Nonce&) { return Bytes(kRankHelloBytes, 0xAB); });  // garbage
  });
  impostors.emplace_back([&] {  // the pre-authentication hello: "FRYT", rank 0, epoch 1
    fds[1] = Impostor(port, [](const Nonce&) {
      Bytes old{'F', 'R', 'Y', 'T', 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
      old.resize(kRankHelloBytes, 0);
      return old;
    });
  });
  impostors.emplace_back([&] {  // a well-formed hello as rank 0 under a guessed secret
    fds[2] = Impostor(port, [](const Nonce& n) { return MakeRankHello(kTcp, "guess", n, RandomNonce(), 0, 1, 1); });
  });
  impostors.emplace_back([&] {  // a rank of epoch 2 (its secret differs) at this epoch's rank
    fds[3] = Impostor(port, [](const Nonce& n) { return MakeRankHello(kTcp, "epoch-2-secret", n, RandomNonce(), 0, 1, 2); });
  });
  impostors.emplace_back([&] { fds[4] = Impostor(port, [](const Nonce&) { return Bytes(); }); });
  Deadline deadline = Deadline::AfterSeconds(20);
  Status connected[2];
  std::thread rank1([&] {
    connected[1] = world.ranks[1]->Connect(0, info0, deadline);
    if (connected[1].ok()) connected[1] = world.ranks[1]->Connect(1, info1, deadline);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1 meets the impostors first
  connected[0] = world.ranks[0]->Connect(0, info0, deadline);
  if (connected[0].ok()) connected[0] = world.ranks[0]->Connect(1, info1, deadline);
  rank1.join();
  for (auto& t : impostors) t.join();
  ASSERT_TRUE(connected[0].ok()) << connected[0].ToString();
  ASSERT_TRUE(connected[1].ok()) << connected[1].ToString();
  // Every impostor but the silent one has been closed without an ack.
  for (int i = 0; i < 4; ++i) {
    uint8_t ack[32];
    EXPECT_FALSE(ReadAll(fds[i], ack, sizeof(ack), Deadline::AfterSeconds(5)).ok()) << "impostor " << i;
  }
  for (int fd : fds) ::close(fd);
  // The real ranks still work: one message from rank 0 to rank 1.
  std::vector<uint8_t> out(4096, 7), in(4096, 0);
  MemoryHandle h0 = MustRegister(*world.ranks[0], out);
  MemoryHandle h1 = MustRegister(*world.ranks[1], in);
  auto recv = world.ranks[1]->PostRecv(0, 42, LocalBuffer{h1, 0, 4096});
  auto send = world.ranks[0]->PostSend(1, 42, LocalBuffer{h0, 0, 4096});
  ASSERT_TRUE(recv.ok() && send.ok());
  Driver driver(world);
  auto done = driver.WaitAll({{0, *send}, {1, *recv}}, Deadline::AfterSeconds(10));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(in, out);
}

int CountEntries(const char* dir) {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++count;
  return count;
}

// 150 garbage and silent connections reach rank 1's listener before rank 0 does: rank 1's
// acceptor (64 handshakes at most, oldest dropped) still lets rank 0 in, and once the transports
// are gone this process's descriptors and threads are back where they were.
TEST(TcpAuthTest, AFloodOfStrangersDoesNotKeepRankZeroOut) {
  const int fds_before = CountEntries("/proc/self/fd");
  const int tasks_before = CountEntries("/proc/self/task");
  {
    Config config(RuntimeConfig());
    ASSERT_TRUE(config.Set("tcp.address", "127.0.0.1").ok());
    TransportWorld world;
    for (int rank = 0; rank < 2; ++rank) {
      auto t = MakeRank(config, rank, 1, "flood-secret");
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      world.ranks.push_back(std::move(*t));
    }
    Bytes info0 = *world.ranks[0]->LocalEndpointInfo();
    Bytes info1 = *world.ranks[1]->LocalEndpointInfo();
    Deadline deadline = Deadline::AfterSeconds(20);
    Status connected[2];
    std::thread rank1([&] {
      connected[1] = world.ranks[1]->Connect(0, info0, deadline);
      if (connected[1].ok()) connected[1] = world.ranks[1]->Connect(1, info1, deadline);
    });
    // The flood arrives while rank 1 waits for rank 0, then rank 0 comes last.
    std::vector<int> flood;
    for (int i = 0; i < 150; ++i) {
      auto fd = ConnectTcp("127.0.0.1", PortOf(info1), Deadline::AfterSeconds(2));
      ASSERT_TRUE(fd.ok()) << "stranger " << i << ": " << fd.status().ToString();
      if (i % 2 == 0) {
        uint8_t garbage[48];
        std::memset(garbage, i, sizeof(garbage));
        ::send(*fd, garbage, sizeof(garbage), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      flood.push_back(*fd);
    }
    connected[0] = world.ranks[0]->Connect(0, info0, deadline);
    if (connected[0].ok()) connected[0] = world.ranks[0]->Connect(1, info1, deadline);
    rank1.join();
    EXPECT_TRUE(connected[0].ok()) << connected[0].ToString();
    EXPECT_TRUE(connected[1].ok()) << connected[1].ToString();
    for (int fd : flood) ::close(fd);
  }
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds_before);
  EXPECT_EQ(CountEntries("/proc/self/task"), tasks_before);
}

TEST(TcpAuthTest, RefusesAContextWithoutSecretOrAWildcardAddress) {
  Config config(RuntimeConfig());
  ASSERT_TRUE(config.Set("tcp.address", "127.0.0.1").ok());
  EXPECT_FALSE(MakeRank(config, 0, 1, "").ok());
  ASSERT_TRUE(config.Set("tcp.address", "0.0.0.0").ok());
  EXPECT_FALSE(MakeRank(config, 0, 1, "s").ok());
}

// The rank hello as the tcp transport and the peer watch run it (HandshakeAcceptor with
// CheckRankHello on one side, ProveRank on the other): a handshake recorded off the wire replays
// in neither direction.
TEST(RankHelloTest, ARecordedHandshakeDoesNotReplay) {
  auto listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const std::string secret = "epoch-secret";
  const RankHelloExpect expect{&secret, 1, 2, 7};
  HandshakeAcceptor acceptor(listener->fd, RankHelloOptions(kTcp, "rank 1"),
                             [&](const Nonce& nonce, std::span<const uint8_t> hello) -> Result<Bytes> {
                               FERRY_ASSIGN_OR_RETURN(RankHelloChecked checked,
                                                      CheckRankHello(kTcp, expect, nonce, hello));
                               return checked.ack;
                             });
  int accepted[2] = {-1, -1};
  std::thread rank1([&] {
    for (int& fd : accepted) {
      auto next = acceptor.Next(Deadline::AfterSeconds(3));
      if (next.ok()) fd = next->fd;
    }
  });
  HandshakeRecorder recorder(listener->port, kRankHelloBytes, kRankAckBytes);
  auto rank0 = ConnectTcp("127.0.0.1", recorder.port(), Deadline::AfterSeconds(5));
  ASSERT_TRUE(rank0.ok());
  Status proved = ProveRank(*rank0, kTcp, secret, 0, 1, 7, Deadline::AfterSeconds(5));
  auto recorded = recorder.Wait();
  ASSERT_TRUE(proved.ok()) << proved.ToString();
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  EXPECT_FALSE(ReplayHelloTo(listener->port, *recorded)) << "rank 1 accepted a replayed hello";
  rank1.join();
  EXPECT_GE(accepted[0], 0) << "the real rank 0 was refused";
  EXPECT_EQ(accepted[1], -1) << "the replayed hello reached rank 1's transport";
  // Rank 0 dialling a fake rank 1 that replays the recorded challenge and ack.
  ReplayingListener fake(*recorded);
  auto fooled = ConnectTcp("127.0.0.1", fake.port(), Deadline::AfterSeconds(5));
  ASSERT_TRUE(fooled.ok());
  Status replayed = ProveRank(*fooled, kTcp, secret, 0, 1, 7, Deadline::AfterSeconds(5));
  EXPECT_EQ(replayed.code(), StatusCode::kUnavailable) << replayed.ToString();
  for (int fd : {*rank0, *fooled, accepted[0], listener->fd}) {
    if (fd >= 0) ::close(fd);
  }
}

TEST(RankHelloTest, ChecksEveryField) {
  Nonce nonce{};
  nonce[0] = 9;
  Nonce client{};
  client[0] = 4;
  RankHelloExpect expect;
  std::string secret = "s";
  expect.secret = &secret;
  expect.my_rank = 3;
  expect.size = 4;
  expect.epoch = 5;
  EXPECT_TRUE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "s", nonce, client, 1, 3, 5)).ok());
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "t", nonce, client, 1, 3, 5)).ok());
  EXPECT_FALSE(CheckRankHello(kTcp, expect, Nonce{}, MakeRankHello(kTcp, "s", nonce, client, 1, 3, 5)).ok());  // replay
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "s", nonce, client, 1, 3, 4)).ok());
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "s", nonce, client, 1, 2, 5)).ok());
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "s", nonce, client, 3, 3, 5)).ok());
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, MakeRankHello(kTcp, "s", nonce, client, -1, 3, 5)).ok());
  Bytes short_hello = MakeRankHello(kTcp, "s", nonce, client, 1, 3, 5);
  short_hello.pop_back();
  EXPECT_FALSE(CheckRankHello(kTcp, expect, nonce, short_hello).ok());
}

}  // namespace
}  // namespace ferry::testing
