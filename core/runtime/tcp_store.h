// The TCP store: rank 0 hosts a TcpStoreServer, or a process of its own does (`ferry store`,
// `ferry run`'s launcher: FERRY_STORE_EXTERNAL=1); every rank talks to it through a TcpStoreClient. Connections prove they hold the shared token (FERRY_TOKEN) before any request is
// read; the token itself never crosses the wire. A connection that fails is closed without an
// answer, counted and logged, and its client gets kUnavailable.
//
// Wire format (little-endian): the handshake of core/runtime/handshake.h with magic "FRYS":
// server -> "FRYS" nonce[16]; client -> client_nonce[16] mac[32], mac = HMAC-SHA-256(token,
// "ferry-store-hello" nonce client_nonce); server -> HMAC-SHA-256(token, "ferry-store-ack" nonce
// client_nonce mac), which the client checks. Both nonces are fresh per connection, so neither a
// recorded hello (to a real store) nor a recorded ack (from a fake one) verifies again.
// Request = u8 op, u64 deadline_millis, u32 key_len, key, then per op: Set u32 len + value,
// Add i64 delta, WaitAtLeast i64 target. Reply = u8 status code, u32 len, payload (value, i64
// counter or error text).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/handshake.h"
#include "core/runtime/store.h"

namespace ferry {

// The client's hello: client_nonce[16] then its MAC over the server's challenge `nonce` and it.
inline constexpr size_t kStoreHelloBytes = 16 + 32;
Bytes MakeStoreHello(const std::string& token, const Nonce& nonce, const Nonce& client_nonce);
// The server's answer to `hello` (32 bytes), proving it holds the token too.
Bytes StoreHelloAck(const std::string& token, const Nonce& nonce, std::span<const uint8_t> hello);

// Bounds on what a flood of connections can take from the server.
struct StoreServerLimits {
  int max_connections = 1024;  // authenticated connections served at once (a thread each)
  int max_pending = 64;        // connections in their handshake at once (no thread each)
  std::chrono::milliseconds hello_timeout{5000};
};

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks one; host "0.0.0.0" every interface, which a caller must
  // ask for by name) and serves until destroyed. Connections without `token` are rejected. The
  // token must be non-empty.
  static Result<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port,
                                                       std::string token,
                                                       StoreServerLimits limits = {});
  ~TcpStoreServer();  // stops serving; waits for its own threads (they all wake on shutdown)

  int port() const { return port_; }
  // Connections refused so far: bad token, silent past the timeout, or over a cap.
  int rejected() const;
  // Authenticated connections being served now.
  int active() const;

 private:
  struct Worker {
    int fd = -1;
    bool done = false;
    std::thread thread;
  };
  TcpStoreServer() = default;
  void AcceptLoop();
  void Serve(int fd);
  Status ServeOne(int fd);
  void Reap();  // joins finished workers and closes their sockets; takes mu_

  int listen_fd_ = -1;
  int port_ = 0;
  std::string token_;
  StoreServerLimits limits_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> over_cap_{0};
  InMemoryStore data_;
  std::unique_ptr<class HandshakeAcceptor> handshakes_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// A client connection. Thread-safe: requests from several threads are serialised on one socket.
class TcpStoreClient final : public Store {
 public:
  // Connects (retrying until `deadline` while the server starts) and presents `token`. A request
  // then fails (kDeadlineExceeded, naming the store host) when no reply has come `reply_grace`
  // after it was sent (Set, Add: the server answers those at once) or after its deadline (Get,
  // WaitAtLeast): a stopped or hung store host is reported within that bound; a closed connection
  // (the host died) at once, naming the store's address. A request that fails on the connection
  // (not with the server's answer) leaves it unusable: later requests return that failure.
  static Result<std::unique_ptr<TcpStoreClient>> Connect(
      const std::string& host, int port, const std::string& token, Deadline deadline,
      std::chrono::duration<double> reply_grace = std::chrono::seconds(5));
  ~TcpStoreClient() override;

  Status Set(std::string_view key, std::span<const uint8_t> value, Deadline deadline) override;
  Result<Bytes> Get(std::string_view key, Deadline deadline) override;
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) override;
  Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline) override;
  void Close() override;
  // HMAC-SHA-256(token, "ferry-job-secret"), computed here: the token's stand-in for keys.
  const std::string& JobSecret() const override { return job_secret_; }

 private:
  TcpStoreClient(int fd, std::string where, std::chrono::duration<double> reply_grace,
                 std::string job_secret)
      : fd_(fd), where_(std::move(where)), reply_grace_(reply_grace), job_secret_(std::move(job_secret)) {}
  Result<Bytes> Request(uint8_t op, std::string_view key, const Bytes& body, Deadline deadline);

  std::mutex mu_;
  int fd_;
  const std::string where_;  // "store host:port", for errors
  const std::chrono::duration<double> reply_grace_;
  const std::string job_secret_;
  Status broken_;  // guarded by mu_: the failure that left the connection unusable
  std::atomic<bool> closed_{false};
};

}  // namespace ferry
