// The tcp transport's wire protocol, seen from a raw socket that authenticates as rank 0 to a real
// rank 1 (transports/tcp/tcp_transport.h): messages above tcp.eager_bytes go by rendezvous (a
// ready-to-send, no payload until the receiver clears it, then the data), a rank clears a
// ready-to-send only once a receive is posted for it, and a frame that breaks the protocol fails
// the peer with a message naming what is wrong, sizing nothing from it.
#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/runtime/rank_hello.h"
#include "core/runtime/socket_util.h"
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {
namespace {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);

constexpr RankHelloProtocol kTcp{{'F', 'R', 'Y', 'T'}, "ferry-tcp"};
constexpr uint64_t kTag = 7;

// A frame header as the protocol lays it out.
struct WireHeader {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;
  uint32_t kind = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(WireHeader) == 32);
constexpr uint32_t kEager = 1, kReadyToSend = 2, kClearToSend = 3, kData = 4;

// Rank 1, a real tcp transport, and `fd`, a socket that proved itself rank 0 to it.
struct RawPeer {
  std::unique_ptr<Config> config;
  std::unique_ptr<Transport> rank1;
  int fd = -1;
  ~RawPeer() {
    if (fd >= 0) ::close(fd);
  }
};

void ConnectRawPeer(RawPeer& peer, const std::string& eager_bytes) {
  peer.config = std::make_unique<Config>(RuntimeConfig());
  ASSERT_TRUE(peer.config->Set("tcp.address", "127.0.0.1").ok());
  ASSERT_TRUE(peer.config->Set("tcp.eager_bytes", eager_bytes).ok());
  const std::string secret = "wire-secret";
  TransportContext context;
  context.rank = 1;
  context.size = 2;
  context.epoch = 1;
  context.config = peer.config.get();
  context.secret = secret;
  auto rank1 = TransportRegistry::Default().Create("tcp", context);
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  peer.rank1 = std::move(*rank1);
  Bytes info = *peer.rank1->LocalEndpointInfo();
  std::string text(info.begin(), info.end());
  const int port = std::atoi(text.substr(text.rfind(':') + 1).c_str());
  Status accepted;
  std::thread accept([&] { accepted = peer.rank1->Connect(0, Bytes{}, Deadline::AfterSeconds(10)); });
  auto fd = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(5));
  Status proved = fd.ok() ? ProveRank(*fd, kTcp, secret, 0, 1, 1, Deadline::AfterSeconds(5)) : fd.status();
  accept.join();
  ASSERT_TRUE(proved.ok()) << proved.ToString();
  ASSERT_TRUE(accepted.ok()) << accepted.ToString();
  peer.fd = *fd;
}

void Write(int fd, const WireHeader& header, const std::vector<uint8_t>& payload = {}) {
  ASSERT_TRUE(WriteAll(fd, &header, sizeof(header), Deadline::AfterSeconds(5)).ok());
  if (!payload.empty()) {
    ASSERT_TRUE(WriteAll(fd, payload.data(), static_cast<int64_t>(payload.size()), Deadline::AfterSeconds(5)).ok());
  }
}

// Polls rank 1 for `ms` milliseconds, collecting its completions.
void PollFor(Transport& rank, int ms, std::vector<Completion>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  Completion completions[8];
  while (std::chrono::steady_clock::now() < until) {
    auto n = rank.Poll(completions, Deadline::After(std::chrono::milliseconds(2)));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    done.insert(done.end(), completions, completions + *n);
  }
}

// True when `fd` has bytes to read within `ms` milliseconds, polling `rank` meanwhile so that it
// makes progress on its side.
bool Readable(int fd, Transport& rank, int ms, std::vector<Completion>& done) {
  for (int waited = 0; waited < ms; waited += 5) {
    PollFor(rank, 5, done);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) return true;
  }
  return false;
}

WireHeader ReadHeader(int fd) {
  WireHeader header;
  EXPECT_TRUE(ReadAll(fd, &header, sizeof(header), Deadline::AfterSeconds(5)).ok());
  return header;
}

std::vector<uint8_t> Pattern(size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  return data;
}

const Completion* Find(const std::vector<Completion>& done, RequestId id) {
  for (const Completion& c : done) {
    if (c.request == id) return &c;
  }
  return nullptr;
}

TEST(TcpWireTest, AMessageOverTheEagerSizeWaitsForClearToSendThenSendsItsData) {
  RawPeer peer;
  ConnectRawPeer(peer, "4KiB");
  std::vector<uint8_t> small = Pattern(4096), large = Pattern(1 << 20);
  MemoryHandle hs = MustRegister(*peer.rank1, small);
  MemoryHandle hl = MustRegister(*peer.rank1, large);
  auto eager = peer.rank1->PostSend(0, 1, LocalBuffer{hs, 0, 4096});
  auto rendezvous = peer.rank1->PostSend(0, 2, LocalBuffer{hl, 0, 1 << 20});
  ASSERT_TRUE(eager.ok() && rendezvous.ok());
  std::vector<Completion> done;
  ASSERT_TRUE(Readable(peer.fd, *peer.rank1, 2000, done));
  WireHeader first = ReadHeader(peer.fd);
  EXPECT_EQ(first.kind, kEager);
  EXPECT_EQ(first.bytes, 4096u);
  std::vector<uint8_t> got(4096);
  ASSERT_TRUE(ReadAll(peer.fd, got.data(), 4096, Deadline::AfterSeconds(5)).ok());
  EXPECT_EQ(got, small);
  WireHeader announce = ReadHeader(peer.fd);
  EXPECT_EQ(announce.kind, kReadyToSend);
  EXPECT_EQ(announce.tag, 2u);
  EXPECT_EQ(announce.bytes, uint64_t{1} << 20);
  // Nothing more until the receiver clears it, and the send is not complete.
  EXPECT_FALSE(Readable(peer.fd, *peer.rank1, 200, done));
  EXPECT_EQ(Find(done, *rendezvous), nullptr);
  Write(peer.fd, WireHeader{0, 0, announce.id, kClearToSend});
  ASSERT_TRUE(Readable(peer.fd, *peer.rank1, 2000, done));
  WireHeader data = ReadHeader(peer.fd);
  EXPECT_EQ(data.kind, kData);
  EXPECT_EQ(data.id, announce.id);
  ASSERT_EQ(data.bytes, uint64_t{1} << 20);
  got.resize(1 << 20);
  ASSERT_TRUE(ReadAll(peer.fd, got.data(), 1 << 20, Deadline::AfterSeconds(5)).ok());
  EXPECT_EQ(got, large);
  PollFor(*peer.rank1, 20, done);
  ASSERT_NE(Find(done, *rendezvous), nullptr);
  EXPECT_TRUE(Find(done, *rendezvous)->status.ok());
}

TEST(TcpWireTest, AReadyToSendIsClearedOnlyOnceItsReceiveIsPosted) {
  RawPeer peer;
  ConnectRawPeer(peer, "64KiB");
  Write(peer.fd, WireHeader{kTag, 300000, 41, kReadyToSend});
  std::vector<Completion> done;
  EXPECT_FALSE(Readable(peer.fd, *peer.rank1, 200, done)) << "cleared before a receive was posted";
  std::vector<uint8_t> in(300000 + 16, 0xEE);
  MemoryHandle h = MustRegister(*peer.rank1, in);
  auto recv = peer.rank1->PostRecv(0, kTag, LocalBuffer{h, 0, static_cast<int64_t>(in.size())});
  ASSERT_TRUE(recv.ok());
  ASSERT_TRUE(Readable(peer.fd, *peer.rank1, 2000, done));
  WireHeader clear = ReadHeader(peer.fd);
  EXPECT_EQ(clear.kind, kClearToSend);
  EXPECT_EQ(clear.id, 41u);
  const std::vector<uint8_t> sent = Pattern(300000);
  Write(peer.fd, WireHeader{kTag, 300000, 41, kData}, sent);
  for (int i = 0; i < 200 && Find(done, *recv) == nullptr; ++i) PollFor(*peer.rank1, 10, done);
  ASSERT_NE(Find(done, *recv), nullptr);
  ASSERT_TRUE(Find(done, *recv)->status.ok()) << Find(done, *recv)->status.ToString();
  EXPECT_EQ(Find(done, *recv)->bytes, 300000);
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), in.begin()));
  EXPECT_EQ(in[300000], 0xEE) << "wrote past the message";
}

TEST(TcpWireTest, AReceiveForAMessageAnnouncedByAPeerThatThenDiedFails) {
  RawPeer peer;
  ConnectRawPeer(peer, "64KiB");
  Write(peer.fd, WireHeader{kTag, 1 << 20, 3, kReadyToSend});
  std::vector<Completion> done;
  PollFor(*peer.rank1, 50, done);
  ::close(peer.fd);
  peer.fd = -1;
  PollFor(*peer.rank1, 50, done);
  std::vector<uint8_t> in(1 << 20);
  MemoryHandle h = MustRegister(*peer.rank1, in);
  auto recv = peer.rank1->PostRecv(0, kTag, LocalBuffer{h, 0, 1 << 20});
  ASSERT_TRUE(recv.ok());
  for (int i = 0; i < 200 && Find(done, *recv) == nullptr; ++i) PollFor(*peer.rank1, 10, done);
  ASSERT_NE(Find(done, *recv), nullptr) << "the receive waits for data that cannot come";
  EXPECT_EQ(Find(done, *recv)->status.code(), StatusCode::kUnavailable) << Find(done, *recv)->status.ToString();
}

// Frames a hostile or corrupt rank 0 writes, some before rank 1 posts `receives` receives for
// kTag and some after, and what the failure of those receives must name.
struct BadStream {
  std::string name;
  std::vector<WireHeader> before, after;
  int receives = 1;
  std::string names;
};

void PrintTo(const BadStream& c, std::ostream* os) { *os << c.name; }

class TcpBadStreamTest : public ::testing::TestWithParam<BadStream> {};

TEST_P(TcpBadStreamTest, FailsThePeerNamingWhatIsWrong) {
  const BadStream& c = GetParam();
  RawPeer peer;
  ConnectRawPeer(peer, "64KiB");
  std::vector<Completion> done;
  for (const WireHeader& h : c.before) Write(peer.fd, h);
  PollFor(*peer.rank1, 50, done);
  std::vector<std::vector<uint8_t>> buffers(static_cast<size_t>(c.receives), std::vector<uint8_t>(1 << 20));
  std::vector<RequestId> recvs;
  for (auto& buffer : buffers) {
    MemoryHandle h = MustRegister(*peer.rank1, buffer);
    auto recv = peer.rank1->PostRecv(0, kTag, LocalBuffer{h, 0, 1 << 20});
    ASSERT_TRUE(recv.ok());
    recvs.push_back(*recv);
  }
  for (const WireHeader& h : c.after) Write(peer.fd, h);
  auto all_done = [&] {
    for (RequestId id : recvs) {
      if (Find(done, id) == nullptr) return false;
    }
    return true;
  };
  for (int i = 0; i < 300 && !all_done(); ++i) PollFor(*peer.rank1, 10, done);
  for (RequestId id : recvs) {  // every receive fails, none waits on
    const Completion* failed = Find(done, id);
    ASSERT_NE(failed, nullptr) << "a receive never completed";
    EXPECT_FALSE(failed->status.ok());
    EXPECT_NE(failed->status.message().find(c.names), std::string::npos) << failed->status.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, TcpBadStreamTest,
    ::testing::Values(
        // The header alone must not size a buffer: no receive is posted when it arrives.
        BadStream{"AbsurdSize", {{kTag, uint64_t{1} << 63, 0, kEager}}, {}, 1, "kMaxMessageBytes"},
        BadStream{"EagerOverTheLimit", {{kTag, (uint64_t{64} << 20) + 1, 0, kEager}}, {}, 1, "kMaxEagerBytes"},
        BadStream{"UnknownKind", {}, {{kTag, 8, 0, 9}}, 1, "frame kind 9"},
        BadStream{"ClearToSendNotAnnounced", {}, {{0, 0, 5, kClearToSend}}, 1, "clear-to-send for message id 5"},
        BadStream{"DataNotCleared", {}, {{kTag, 100, 5, kData}}, 1, "data for message id 5"},
        BadStream{"DataOfAnotherSize", {}, {{kTag, 1 << 20, 5, kReadyToSend}, {kTag, 100, 5, kData}}, 1,
                  "announced as 1048576 bytes"},
        BadStream{"AnnouncedTwice", {}, {{kTag, 1 << 20, 5, kReadyToSend}, {kTag, 1 << 20, 5, kReadyToSend}}, 2,
                  "announced twice"}),
    [](const ::testing::TestParamInfo<BadStream>& info) { return info.param.name; });

// Eager messages of 32 MiB from two peers, whose receives are posted while they arrive: the
// bytes in so far are copied, the rest read in place; a receive too small for its message fails
// and the stream goes on.
TEST(TcpWireTest, AReceivePostedWhileItsEagerMessageArrivesGetsEveryByte) {
  ConformanceParams params =
      ConformanceParams::For("tcp", {{"tcp.address", "127.0.0.1"}, {"tcp.eager_bytes", "64MiB"}});
  auto world = CreateTransportWorld(params, 3, Deadline::AfterSeconds(30));
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  Driver driver(*world);
  constexpr int64_t kBytes = int64_t{32} << 20;
  std::vector<uint8_t> sent = Pattern(kBytes + 1), other = Pattern(kBytes), next = Pattern(64);
  std::vector<uint8_t> in(kBytes + 16, 0xEE), small(1024), next_in(64);
  MemoryHandle hs = MustRegister(*world->ranks[0], sent);
  MemoryHandle ho = MustRegister(*world->ranks[2], other);
  MemoryHandle hn = MustRegister(*world->ranks[2], next);
  MemoryHandle hi = MustRegister(*world->ranks[1], in);
  MemoryHandle hm = MustRegister(*world->ranks[1], small);
  MemoryHandle hx = MustRegister(*world->ranks[1], next_in);
  auto send = world->ranks[0]->PostSend(1, 1, LocalBuffer{hs, 0, kBytes + 1});
  auto send_other = world->ranks[2]->PostSend(1, 2, LocalBuffer{ho, 0, kBytes});
  auto send_next = world->ranks[2]->PostSend(1, 3, LocalBuffer{hn, 0, 64});
  ASSERT_TRUE(send.ok() && send_other.ok() && send_next.ok());
  ASSERT_TRUE(driver.PollOnce().ok());
  auto recv = world->ranks[1]->PostRecv(0, 1, LocalBuffer{hi, 0, kBytes + 16});
  auto too_small = world->ranks[1]->PostRecv(2, 2, LocalBuffer{hm, 0, 1024});
  auto recv_next = world->ranks[1]->PostRecv(2, 3, LocalBuffer{hx, 0, 64});
  ASSERT_TRUE(recv.ok() && too_small.ok() && recv_next.ok());
  auto done = driver.WaitAll({{1, *recv}, {1, *too_small}, {1, *recv_next}, {0, *send}, {2, *send_other}},
                             Deadline::AfterSeconds(30));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_TRUE((*done)[0].status.ok()) << (*done)[0].status.ToString();
  EXPECT_EQ((*done)[0].bytes, kBytes + 1);
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), in.begin()));
  EXPECT_EQ(in[kBytes + 1], 0xEE) << "wrote past the message";
  EXPECT_EQ((*done)[1].status.code(), StatusCode::kOutOfRange) << (*done)[1].status.ToString();
  ASSERT_TRUE((*done)[2].status.ok()) << (*done)[2].status.ToString();
  EXPECT_EQ(next_in, next);
}

TEST(TcpWireTest, EagerBytesOverTheLimitIsRefused) {
  Config config(RuntimeConfig());
  ASSERT_TRUE(config.Set("tcp.address", "127.0.0.1").ok());
  ASSERT_TRUE(config.Set("tcp.eager_bytes", "65MiB").ok());
  TransportContext context;
  context.size = 1;
  context.config = &config;
  context.secret = "s";
  auto made = TransportRegistry::Default().Create("tcp", context);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("tcp.eager_bytes"), std::string::npos) << made.status().ToString();
}

}  // namespace
}  // namespace ferry::testing
