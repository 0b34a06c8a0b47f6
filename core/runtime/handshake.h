// The authenticated handshake every ferry listener runs before it accepts a byte of payload (the
// TCP store and the tcp transport), and the acceptor that runs many handshakes at once without a
// thread each, so that a flood of silent or garbage connections cannot starve the real ones.
//
// Wire: on accept the server sends a challenge, 4 magic bytes (which protocol) + a 16-byte random
// nonce. The client answers with a fixed-size hello that carries an HMAC-SHA-256 over the nonce
// and its fields, keyed by the shared secret. The server checks it (Verifier) and sends a
// fixed-size reply (normally its own HMAC over the nonce and the client's MAC, so the client
// knows the server holds the secret too). A connection that fails, stays silent past the hello
// timeout, or is the oldest when `max_pending` handshakes are open is closed, counted and logged
// on stderr (the first few, then a count), and never returned to the caller.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store.h"

namespace ferry {

using Nonce = std::array<uint8_t, 16>;
using Magic = std::array<char, 4>;

struct HandshakeOptions {
  std::string what;  // who listens, for log lines ("the store", "tcp rank 3")
  Magic magic{};
  size_t hello_bytes = 0;  // the client's hello is exactly this long
  int max_pending = 64;    // handshakes open at once; the oldest is dropped beyond it
  std::chrono::milliseconds hello_timeout{5000};
  int log_first = 8;  // rejections logged one by one; later ones are only counted
};

// Checks a hello against the nonce sent; returns the reply to send (accepted) or an error saying
// why the peer is refused (logged with its address).
using HandshakeVerifier =
    std::function<Result<Bytes>(const Nonce& nonce, std::span<const uint8_t> hello)>;

class HandshakeAcceptor {
 public:
  // `listen_fd` is not owned and must outlive the acceptor; it is made non-blocking.
  HandshakeAcceptor(int listen_fd, HandshakeOptions options, HandshakeVerifier verify);
  ~HandshakeAcceptor();  // closes connections still in their handshake
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  struct Accepted {
    int fd = -1;  // owned by the caller; -1 when the deadline passed first
    Bytes hello;
  };
  // Accepts connections and advances their handshakes until one passes (returned) or `deadline`
  // (fd -1). Blocks until then. One thread at a time; rejected() from any thread.
  Result<Accepted> Next(Deadline deadline);

  int rejected() const { return rejected_.load(); }
  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  struct Pending {
    int fd = -1;
    Nonce nonce{};
    Bytes hello;
    std::chrono::steady_clock::time_point expires;
    std::string peer;  // address:port, for the log
  };
  void AcceptNew();
  // Reads what has arrived; returns true when `p` is done (accepted into `out` or rejected).
  bool Advance(Pending& p, Accepted& out);
  void Reject(Pending& p, const std::string& why);
  void DropExpired();

  int listen_fd_;
  HandshakeOptions options_;
  HandshakeVerifier verify_;
  std::vector<Pending> pending_;
  std::atomic<int> rejected_{0};
};

// The client side: reads the challenge (checking `magic`), sends make_hello(nonce), and reads a
// reply of `reply_bytes`, all by `deadline`. Returns the nonce and the reply for the caller to
// check. A server that closes without replying has refused us (kUnavailable).
struct HandshakeReply {
  Nonce nonce{};
  Bytes reply;
};
Result<HandshakeReply> ClientHandshake(int fd, const Magic& magic,
                                       const std::function<Bytes(const Nonce&)>& make_hello,
                                       size_t reply_bytes, Deadline deadline);

// A 16-byte authenticator for messages from rank `from` to rank `to` on `transport`, derived from
// the communicator's secret (TransportContext::secret): transports whose library owns the wire
// (ucx, libfabric) carry it in, or fold it into, every message, and the receiver drops messages
// whose authenticator is not the one it derives for the claimed sender. Without the secret it
// cannot be computed; it differs per direction, pair, transport and epoch (the secret does).
using PairAuthenticator = std::array<uint8_t, 16>;
PairAuthenticator DerivePairAuthenticator(const std::string& secret, std::string_view transport,
                                          int from, int to);

// Appends the bytes of a trivially copyable value (the wire is little-endian, like the hosts).
template <typename T>
void AppendRaw(Bytes& out, const T& value) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

}  // namespace ferry
