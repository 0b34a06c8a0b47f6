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
#include <condition_variable>
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

// How often a server worker waiting on behalf of a client (Get, WaitAtLeast) checks that the
// client is still there: one that left (an interrupted TcpStoreClient drops its connection) frees
// its worker and connection slot within this, not at the wait's deadline.
inline constexpr std::chrono::milliseconds kStoreHangupCheck{100};

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

// A client connection. Thread-safe: requests from several threads take turns on one socket.
//
// Interrupts (Store contract): a Get or WaitAtLeast given a StoreInterrupt polls the socket
// together with an eventfd that the interrupt's firing (and Close) writes, so that it returns the
// interrupt's reason within milliseconds, whether it is waiting for the server's reply or for its
// turn behind another thread's request. The server still answers the request that was cut short,
// possibly only at its deadline, so the client drops that connection and the next request opens a
// fresh one with the full token handshake (one attempt: a refused reconnect is kUnavailable at
// once). The server notices the dropped connection during the wait and frees its slot
// (TcpStoreServer: within kHangupCheck). Close() may be called from any thread, during requests.
class TcpStoreClient final : public Store {
 public:
  // Connects (retrying until `deadline` while the server starts) and presents `token`. A request
  // then fails (kDeadlineExceeded, naming the store host) when no reply has come `reply_grace`
  // after it was sent (Set, Add: the server answers those at once) or after its deadline (Get,
  // WaitAtLeast): a stopped or hung store host is reported within that bound; a closed connection
  // (the host died) at once, naming the store's address. A request that fails on the connection
  // (not with the server's answer, nor cut short by an interrupt) leaves the client unusable:
  // later requests return that failure.
  static Result<std::unique_ptr<TcpStoreClient>> Connect(
      const std::string& host, int port, const std::string& token, Deadline deadline,
      std::chrono::duration<double> reply_grace = std::chrono::seconds(5));
  ~TcpStoreClient() override;

  using Store::Get;
  using Store::WaitAtLeast;
  Status Set(std::string_view key, std::span<const uint8_t> value, Deadline deadline) override;
  Result<Bytes> Get(std::string_view key, Deadline deadline, StoreInterrupt* interrupt) override;
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) override;
  Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline,
                     StoreInterrupt* interrupt) override;
  void Close() override;
  // HMAC-SHA-256(token, "ferry-job-secret"), computed here: the token's stand-in for keys.
  const std::string& JobSecret() const override { return job_secret_; }

 private:
  TcpStoreClient(std::string host, int port, std::string token, std::chrono::duration<double> reply_grace);
  // Opens an authenticated connection (ConnectTcp, then the token handshake); the socket or why not.
  Result<int> Open(Deadline deadline, bool retry_refused) const;
  Result<Bytes> Request(uint8_t op, std::string_view key, const Bytes& body, Deadline deadline,
                        StoreInterrupt* interrupt);
  // How a request on the connection ended: with the server's reply (the connection is in step),
  // cut short by Close or an interrupt, or lost (a failure of the connection or the reconnect).
  enum class Ended { kReplied, kCut, kLost };
  // The request on the connection (opened first when an interrupt dropped the last one); the
  // caller owns fd_ (busy_) and drops the connection unless `how` is kReplied.
  Result<Bytes> Exchange(uint8_t op, std::string_view key, const Bytes& request, Deadline deadline,
                         StoreInterrupt* interrupt, Ended& how);
  // Moves all `bytes` over fd_ (writing when `out`), like ReadAll/WriteAll, but returns early with
  // `cut` set when Close or `interrupt` fired.
  Status Transfer(bool out, void* data, int64_t bytes, Deadline deadline, StoreInterrupt* interrupt, bool& cut);
  // Close or `interrupt` has fired.
  bool Cut(const StoreInterrupt* interrupt) const;
  // Wakes the request in progress and any request waiting for its turn (an interrupt fired, or
  // Close). Any thread; takes mu_.
  void Wake();

  const std::string host_;
  const int port_;
  const std::string token_;
  const std::string where_;  // "store host:port", for errors
  const std::chrono::duration<double> reply_grace_;
  const std::string job_secret_;
  int wake_fd_ = -1;  // eventfd written by Wake; read (reset) by the request in progress
  std::mutex mu_;
  std::condition_variable turn_;  // a request finished, or Wake
  bool busy_ = false;  // guarded by mu_: a request owns fd_
  int fd_ = -1;        // owned by the request in progress; -1: the next request opens one
  Status broken_;      // guarded by mu_: the failure that left the connection unusable
  std::atomic<bool> closed_{false};
};

}  // namespace ferry
