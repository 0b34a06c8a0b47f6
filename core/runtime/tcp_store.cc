// TcpStoreServer and TcpStoreClient.
#include "core/runtime/tcp_store.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/base/hmac.h"
#include "core/runtime/handshake.h"
#include "core/runtime/socket_util.h"

namespace ferry {

namespace {

constexpr Magic kMagic = {'F', 'R', 'Y', 'S'};
constexpr uint32_t kMaxKey = 1 << 16;
constexpr uint32_t kMaxValue = 64u << 20;
constexpr uint64_t kMaxWaitMillis = 7ull * 24 * 3600 * 1000;  // a week: "never" in practice
enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };

void PutU32(Bytes& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}
void PutU64(Bytes& out, uint64_t v) {
  uint8_t b[8];
  std::memcpy(b, &v, 8);
  out.insert(out.end(), b, b + 8);
}

Digest ToDigest(const Bytes& bytes) {
  Digest d{};
  if (bytes.size() == d.size()) std::memcpy(d.data(), bytes.data(), d.size());
  return d;
}

// HMAC-SHA-256(token, label nonce tail).
Digest TokenMac(const std::string& token, std::string_view label, const Nonce& nonce,
                std::span<const uint8_t> tail) {
  Bytes message(label.begin(), label.end());
  message.insert(message.end(), nonce.begin(), nonce.end());
  message.insert(message.end(), tail.begin(), tail.end());
  return HmacSha256(token, message);
}

Result<Bytes> CheckStoreHello(const std::string& token, const Nonce& nonce,
                              std::span<const uint8_t> hello) {
  if (hello.size() != kStoreHelloBytes) return InvalidArgument("malformed store hello");
  Nonce client_nonce{};
  std::memcpy(client_nonce.data(), hello.data(), client_nonce.size());
  const Bytes expected = MakeStoreHello(token, nonce, client_nonce);
  if (!DigestEqual(ToDigest(Bytes(hello.begin() + 16, hello.end())),
                   ToDigest(Bytes(expected.begin() + 16, expected.end())))) {
    return InvalidArgument("wrong token (not FERRY_TOKEN of this job)");
  }
  return StoreHelloAck(token, nonce, hello);
}

// Deadline carried over the wire as milliseconds left (the hosts' clocks need not agree).
uint64_t MillisLeft(Deadline d) { return static_cast<uint64_t>(d.RemainingMillis()); }

}  // namespace

Bytes MakeStoreHello(const std::string& token, const Nonce& nonce, const Nonce& client_nonce) {
  const Digest mac = TokenMac(token, "ferry-store-hello", nonce, client_nonce);
  Bytes hello(client_nonce.begin(), client_nonce.end());
  hello.insert(hello.end(), mac.begin(), mac.end());
  return hello;
}

Bytes StoreHelloAck(const std::string& token, const Nonce& nonce, std::span<const uint8_t> hello) {
  const Digest ack = TokenMac(token, "ferry-store-ack", nonce, hello);
  return Bytes(ack.begin(), ack.end());
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port,
                                                              std::string token,
                                                              StoreServerLimits limits) {
  if (token.empty()) return InvalidArgument("the store needs a non-empty token (set FERRY_TOKEN)");
  if (limits.max_connections < 1 || limits.max_pending < 1) {
    return InvalidArgument("the store's connection caps must be at least 1");
  }
  FERRY_ASSIGN_OR_RETURN(Listener listener, ListenTcp(host, port));
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->listen_fd_ = listener.fd;
  server->port_ = listener.port;
  server->token_ = std::move(token);
  server->limits_ = limits;
  HandshakeOptions options;
  options.what = "the store";
  options.magic = kMagic;
  options.hello_bytes = kStoreHelloBytes;
  options.max_pending = limits.max_pending;
  options.hello_timeout = limits.hello_timeout;
  server->handshakes_ = std::make_unique<HandshakeAcceptor>(
      listener.fd, options,
      [key = server->token_](const Nonce& nonce, std::span<const uint8_t> hello) {
        return CheckStoreHello(key, nonce, hello);
      });
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  data_.Close();
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers_) ::shutdown(w->fd, SHUT_RDWR);
  }
  for (auto& w : workers_) w->thread.join();
  for (auto& w : workers_) ::close(w->fd);
  handshakes_.reset();
  ::close(listen_fd_);
}

int TcpStoreServer::rejected() const { return handshakes_->rejected() + over_cap_.load(); }

int TcpStoreServer::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  int count = 0;
  for (const auto& w : workers_) count += w->done ? 0 : 1;
  return count;
}

void TcpStoreServer::Reap() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : workers_) {
    if (!w->done) continue;
    w->thread.join();
    ::close(w->fd);
    w.reset();
  }
  std::erase_if(workers_, [](const std::unique_ptr<Worker>& w) { return w == nullptr; });
}

void TcpStoreServer::AcceptLoop() {
  while (!stopping_) {
    auto accepted = handshakes_->Next(Deadline::After(std::chrono::milliseconds(100)));
    Reap();
    if (!accepted.ok() || accepted->fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || static_cast<int>(workers_.size()) >= limits_.max_connections) {
      if (!stopping_ && ++over_cap_ <= 8) {
        std::fprintf(stderr, "ferry: the store refused an authenticated connection: %d open (the cap)\n",
                     limits_.max_connections);
      }
      ::close(accepted->fd);
      continue;
    }
    auto worker = std::make_unique<Worker>();
    Worker* w = worker.get();
    w->fd = accepted->fd;
    w->thread = std::thread([this, w] {
      Serve(w->fd);
      std::lock_guard<std::mutex> done_lock(mu_);
      w->done = true;
    });
    workers_.push_back(std::move(worker));
  }
}

void TcpStoreServer::Serve(int fd) {
  while (!stopping_) {
    if (!ServeOne(fd).ok()) return;
  }
}

// One request and its reply. An error ends the connection (malformed request or closed socket).
Status TcpStoreServer::ServeOne(int fd) {
  uint8_t op = 0;
  uint64_t millis = 0;
  uint32_t key_len = 0;
  FERRY_RETURN_IF_ERROR(ReadAll(fd, &op, 1, Deadline::Never()));
  Deadline io = Deadline::AfterSeconds(30);
  FERRY_RETURN_IF_ERROR(ReadAll(fd, &millis, 8, io));
  FERRY_RETURN_IF_ERROR(ReadAll(fd, &key_len, 4, io));
  if (key_len > kMaxKey) return InvalidArgument("store: key over the limit");
  if (op < kSet || op > kWait) return InvalidArgument("store: unknown op");
  std::string key(key_len, '\0');
  FERRY_RETURN_IF_ERROR(ReadAll(fd, key.data(), key_len, io));
  Deadline deadline =
      Deadline::After(std::chrono::milliseconds(std::min<uint64_t>(millis, kMaxWaitMillis)));
  Status status;
  Bytes payload;
  if (op == kSet) {
    uint32_t len = 0;
    FERRY_RETURN_IF_ERROR(ReadAll(fd, &len, 4, io));
    if (len > kMaxValue) return InvalidArgument("store: value over the limit");
    Bytes value(len);
    FERRY_RETURN_IF_ERROR(ReadAll(fd, value.data(), len, io));
    status = data_.Set(key, value, deadline);
  } else if (op == kGet) {
    auto value = data_.Get(key, deadline);
    status = value.status();
    if (value.ok()) payload = std::move(*value);
  } else {
    int64_t number = 0;
    FERRY_RETURN_IF_ERROR(ReadAll(fd, &number, 8, io));
    if (op == kAdd) {
      auto sum = data_.Add(key, number, deadline);
      if (sum.ok()) PutU64(payload, static_cast<uint64_t>(*sum));
      status = sum.status();
    } else {
      status = data_.WaitAtLeast(key, number, deadline);
    }
  }
  Bytes reply;
  reply.push_back(static_cast<uint8_t>(status.code()));
  if (!status.ok()) payload.assign(status.message().begin(), status.message().end());
  PutU32(reply, static_cast<uint32_t>(payload.size()));
  reply.insert(reply.end(), payload.begin(), payload.end());
  return WriteAll(fd, reply.data(), static_cast<int64_t>(reply.size()), io);
}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                const std::string& token,
                                                                Deadline deadline,
                                                                std::chrono::duration<double> reply_grace) {
  std::string where = "store " + host + ":" + std::to_string(port);
  auto fd = ConnectTcp(host, port, deadline);
  if (!fd.ok()) return fd.status().WithContext(where);
  const Digest job_secret = HmacSha256(token, "ferry-job-secret");
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(
      *fd, where, reply_grace, std::string(job_secret.begin(), job_secret.end())));
  const Nonce client_nonce = RandomNonce();
  Bytes hello;
  auto reply = ClientHandshake(
      *fd, kMagic,
      [&](const Nonce& nonce) { return hello = MakeStoreHello(token, nonce, client_nonce); },
      32, deadline);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      return reply.status().WithContext(where);
    }
    return Unavailable(where + " rejected the connection (is FERRY_TOKEN the same on every rank?): " +
                       reply.status().message());
  }
  if (!DigestEqual(ToDigest(reply->reply), ToDigest(StoreHelloAck(token, reply->nonce, hello)))) {
    return Unavailable(where + " answered without proof of the token: not this job's store");
  }
  return client;
}

TcpStoreClient::~TcpStoreClient() { ::close(fd_); }

void TcpStoreClient::Close() {
  closed_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

Result<Bytes> TcpStoreClient::Request(uint8_t op, std::string_view key, const Bytes& body,
                                      Deadline deadline) {
  if (closed_) return Aborted("store closed");
  Bytes request;
  request.push_back(op);
  PutU64(request, MillisLeft(deadline));
  PutU32(request, static_cast<uint32_t>(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  request.insert(request.end(), body.begin(), body.end());
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  const auto grace = std::chrono::duration_cast<Deadline::Clock::duration>(reply_grace_);
  // The server answers by `deadline` (Set and Add at once); a reply later than `grace` beyond
  // that means the host is stopped, hung or unreachable.
  Deadline io = Deadline::After(deadline.Remaining() + grace);
  if (deadline.when() == Deadline::Clock::time_point::max()) io = Deadline::Never();
  Status status = WriteAll(fd_, request.data(), static_cast<int64_t>(request.size()), io);
  if (op == kSet || op == kAdd) io = Deadline::After(grace);
  uint8_t code = 0;
  uint32_t len = 0;
  if (status.ok()) status = ReadAll(fd_, &code, 1, io);
  if (status.code() == StatusCode::kDeadlineExceeded) {
    status = DeadlineExceeded("no reply from the " + where_ + " within " +
                              std::to_string(reply_grace_.count()) +
                              " s beyond the request's deadline (its host is stopped, hung or unreachable)");
  }
  if (status.ok()) status = ReadAll(fd_, &len, 4, io);
  if (status.ok() && len > kMaxValue + kMaxKey) {
    status = IoError("store reply of " + std::to_string(len) + " bytes is over the limit");
  }
  Bytes payload(status.ok() ? len : 0);
  if (status.ok()) status = ReadAll(fd_, payload.data(), len, io);
  if (!status.ok()) {
    if (closed_) return Aborted("store closed");
    // A reply may still be on its way: later requests would read it as theirs.
    // Named by address: with an external store no rank's death explains its loss.
    broken_ = status.WithContext("an earlier request to the " + where_);
    ::shutdown(fd_, SHUT_RDWR);
    return status.WithContext("request for key '" + std::string(key) + "' to the " + where_);
  }
  if (code != 0) {
    return Status(static_cast<StatusCode>(code), std::string(payload.begin(), payload.end()));
  }
  return payload;
}

Status TcpStoreClient::Set(std::string_view key, std::span<const uint8_t> value,
                           Deadline deadline) {
  Bytes body;
  PutU32(body, static_cast<uint32_t>(value.size()));
  body.insert(body.end(), value.begin(), value.end());
  return Request(kSet, key, body, deadline).status();
}

Result<Bytes> TcpStoreClient::Get(std::string_view key, Deadline deadline) {
  return Request(kGet, key, {}, deadline);
}

Result<int64_t> TcpStoreClient::Add(std::string_view key, int64_t delta, Deadline deadline) {
  Bytes body;
  PutU64(body, static_cast<uint64_t>(delta));
  FERRY_ASSIGN_OR_RETURN(Bytes reply, Request(kAdd, key, body, deadline));
  if (reply.size() != 8) return Internal("store: malformed counter reply");
  int64_t value = 0;
  std::memcpy(&value, reply.data(), 8);
  return value;
}

Status TcpStoreClient::WaitAtLeast(std::string_view key, int64_t target, Deadline deadline) {
  Bytes body;
  PutU64(body, static_cast<uint64_t>(target));
  return Request(kWait, key, body, deadline).status();
}

}  // namespace ferry
