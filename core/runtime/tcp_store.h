// The TCP store: rank 0 hosts a TcpStoreServer; every rank (rank 0 included) talks to it through a
// TcpStoreClient. Connections must present the shared token (FERRY_TOKEN) first; a connection
// with a wrong or missing token is closed without an answer and its client gets kUnavailable.
//
// Wire format (little-endian): hello = "FRYS" u32 token_len, token; server answers 1 byte 'K'.
// Request = u8 op, u64 deadline_millis, u32 key_len, key, then per op: Set u32 len + value,
// Add i64 delta, WaitAtLeast i64 target. Reply = u8 status code, u32 len, payload (value, i64
// counter or error text).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/store.h"

namespace ferry {

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks one) and serves until destroyed. Connections without
  // `token` are rejected. The token must be non-empty.
  static Result<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port,
                                                       std::string token);
  ~TcpStoreServer();  // stops serving; waits for its own threads (they all wake on shutdown)

  int port() const { return port_; }
  // Connections rejected for a bad token so far.
  int rejected() const { return rejected_.load(); }

 private:
  TcpStoreServer() = default;
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::string token_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> rejected_{0};
  InMemoryStore data_;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> connections_;
  std::vector<std::thread> workers_;
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
