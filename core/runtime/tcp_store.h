// The TCP store: rank 0 hosts a TcpStoreServer; every rank (rank 0 included) talks to it through a
// TcpStoreClient. Connections prove they hold the shared token (FERRY_TOKEN) before any request is
// read; the token itself never crosses the wire. A connection that fails is closed without an
// answer, counted and logged, and its client gets kUnavailable.
//
// Wire format (little-endian): the handshake of core/runtime/handshake.h with magic "FRYS":
// server -> "FRYS" nonce[16]; client -> mac[32] = HMAC-SHA-256(token, "ferry-store-hello" nonce);
// server -> HMAC-SHA-256(token, "ferry-store-ack" nonce mac), which the client checks.
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

#include "core/runtime/store.h"

namespace ferry {

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
  // Connects (retrying until `deadline` while the server starts) and presents `token`.
  static Result<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                         const std::string& token,
                                                         Deadline deadline);
  ~TcpStoreClient() override;

  Status Set(std::string_view key, std::span<const uint8_t> value, Deadline deadline) override;
  Result<Bytes> Get(std::string_view key, Deadline deadline) override;
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) override;
  Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline) override;
  void Close() override;

 private:
  explicit TcpStoreClient(int fd) : fd_(fd) {}
  Result<Bytes> Request(uint8_t op, std::string_view key, const Bytes& body, Deadline deadline);

  std::mutex mu_;
  int fd_;
  std::atomic<bool> closed_{false};
};

}  // namespace ferry
