// Fuzz targets for the TCP store's wire, over loopback: the first byte of an input picks what
// the rest is —
//   0: a stranger's handshake (raw bytes where the hello goes),
//   1: an authenticated client's requests (the server's request parser),
//   2: a hostile store's reply to a client's Get (the client's reply parser).
// The server must answer or drop each, never crash, and keep serving.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/base/hmac.h"
#include "core/runtime/handshake.h"
#include "core/runtime/socket_util.h"
#include "core/runtime/tcp_store.h"
#include "tests/fuzz/fuzz_driver.h"

namespace ferry {
namespace {

constexpr char kToken[] = "fuzz-token";
constexpr Magic kStoreMagic = {'F', 'R', 'Y', 'S'};

Bytes Hello(const Nonce& nonce) { return MakeStoreHello(kToken, nonce, RandomNonce()); }

// The server under test. Recreated every so often: a fuzzed Wait may hold its thread until a
// deadline far away, and destroying the server is what wakes such waits.
std::unique_ptr<TcpStoreServer>& ServerSlot() {
  static std::unique_ptr<TcpStoreServer> server;
  return server;
}

TcpStoreServer& Server() {
  static int uses = 0;
  std::unique_ptr<TcpStoreServer>& server = ServerSlot();
  if (server == nullptr || ++uses % 256 == 0) {
    server.reset();
    StoreServerLimits limits;
    limits.hello_timeout = std::chrono::milliseconds(200);
    auto started = TcpStoreServer::Start("127.0.0.1", 0, kToken, limits);
    if (!started.ok()) std::abort();
    server = std::move(*started);
  }
  return *server;
}

// Sends `bytes` to the server (after a valid handshake when `authenticated`), then waits for it
// to answer or close.
void ToServer(std::span<const uint8_t> bytes, bool authenticated) {
  const int port = Server().port();
  auto fd = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(2));
  if (!fd.ok()) std::abort();  // the server must stay reachable
  Deadline deadline = Deadline::AfterSeconds(2);
  if (authenticated) {
    auto reply = ClientHandshake(*fd, kStoreMagic, &Hello, 32, deadline);
    if (!reply.ok()) std::abort();  // a real client must still get in
  }
  (void)WriteAll(*fd, bytes.data(), static_cast<int64_t>(bytes.size()), deadline);
  ::shutdown(*fd, SHUT_WR);
  uint8_t sink[256];
  while (ReadAll(*fd, sink, 1, Deadline::After(std::chrono::milliseconds(50))).ok()) {
  }
  ::close(*fd);
}

// A fake store that passes the handshake, then answers the client's Get with `bytes`.
void ToClient(std::span<const uint8_t> bytes) {
  auto listener = ListenTcp("127.0.0.1", 0);
  if (!listener.ok()) return;
  std::thread fake([&] {
    auto fd = AcceptTcp(listener->fd, Deadline::AfterSeconds(2));
    if (!fd.ok() || *fd < 0) return;
    Nonce nonce = RandomNonce();
    Bytes challenge(kStoreMagic.begin(), kStoreMagic.end());
    challenge.insert(challenge.end(), nonce.begin(), nonce.end());
    uint8_t hello[kStoreHelloBytes];
    Deadline d = Deadline::AfterSeconds(2);
    if (WriteAll(*fd, challenge.data(), 20, d).ok() && ReadAll(*fd, hello, sizeof(hello), d).ok()) {
      const Bytes ack = StoreHelloAck(kToken, nonce, hello);
      (void)WriteAll(*fd, ack.data(), 32, d);
      (void)WriteAll(*fd, bytes.data(), static_cast<int64_t>(bytes.size()), d);
    }
    ::shutdown(*fd, SHUT_RDWR);
    ::close(*fd);
  });
  auto client = TcpStoreClient::Connect("127.0.0.1", listener->port, kToken, Deadline::AfterSeconds(2));
  if (client.ok()) (void)(*client)->Get("k", Deadline::After(std::chrono::milliseconds(50)));
  fake.join();
  ::close(listener->fd);
}

int StoreTarget(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> rest(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      ToServer(rest, false);
      break;
    case 1:
      ToServer(rest, true);
      break;
    default:
      ToClient(rest);
  }
  return 0;
}

TEST(StoreFuzz, ServerAndClientWire) {
  fuzz::FuzzSummary s = fuzz::RunFuzzer(&StoreTarget, {"store", "tests/fuzz/corpus/store", 3, 512});
  EXPECT_GT(s.corpus_inputs, 0);
  // After the fuzzing the server still serves a real client.
  auto client = TcpStoreClient::Connect("127.0.0.1", Server().port(), kToken, Deadline::AfterSeconds(5));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Set("after", Bytes{1}, Deadline::AfterSeconds(5)).ok());
  EXPECT_TRUE((*client)->Get("after", Deadline::AfterSeconds(5)).ok());
  client->reset();
  ServerSlot().reset();
}

}  // namespace
}  // namespace ferry
