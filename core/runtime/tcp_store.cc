// TcpStoreServer and TcpStoreClient.
#include "core/runtime/tcp_store.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/runtime/socket_util.h"

namespace ferry {

namespace {

constexpr char kMagic[4] = {'F', 'R', 'Y', 'S'};
constexpr uint32_t kMaxToken = 4096;
constexpr uint32_t kMaxKey = 1 << 16;
constexpr uint32_t kMaxValue = 64u << 20;
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

// Deadline carried over the wire as milliseconds left (the hosts' clocks need not agree).
uint64_t MillisLeft(Deadline d) { return static_cast<uint64_t>(d.RemainingMillis()); }

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port,
                                                              std::string token) {
  if (token.empty()) return InvalidArgument("the store needs a non-empty token (set FERRY_TOKEN)");
  FERRY_ASSIGN_OR_RETURN(Listener listener, ListenTcp(host, port));
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->listen_fd_ = listener.fd;
  server->port_ = listener.port;
  server->token_ = std::move(token);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  data_.Close();
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : workers_) t.join();
  for (int fd : connections_) ::close(fd);
  ::close(listen_fd_);
}

void TcpStoreServer::AcceptLoop() {
  while (!stopping_) {
    auto fd = AcceptTcp(listen_fd_, Deadline::After(std::chrono::milliseconds(100)));
    if (!fd.ok()) {
      if (stopping_) return;
      continue;
    }
    if (*fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(*fd);
      return;
    }
    connections_.push_back(*fd);
    workers_.emplace_back([this, c = *fd] { Serve(c); });
  }
}

void TcpStoreServer::Serve(int fd) {
  // The hello must arrive promptly; a silent stranger is dropped.
  Deadline hello_deadline = Deadline::AfterSeconds(10);
  char magic[4];
  uint32_t token_len = 0;
  bool accepted = ReadAll(fd, magic, 4, hello_deadline).ok() &&
                  std::memcmp(magic, kMagic, 4) == 0 &&
                  ReadAll(fd, &token_len, 4, hello_deadline).ok() && token_len <= kMaxToken;
  std::string token(accepted ? token_len : 0, '\0');
  accepted = accepted && ReadAll(fd, token.data(), token_len, hello_deadline).ok() &&
             token == token_;
  if (!accepted) {
    ++rejected_;
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  uint8_t ok = 'K';
  if (!WriteAll(fd, &ok, 1, hello_deadline).ok()) return;
  while (!stopping_) {
    uint8_t op = 0;
    uint64_t millis = 0;
    uint32_t key_len = 0;
    if (!ReadAll(fd, &op, 1, Deadline::Never()).ok()) return;
    Deadline io = Deadline::AfterSeconds(30);
    if (!ReadAll(fd, &millis, 8, io).ok() || !ReadAll(fd, &key_len, 4, io).ok() ||
        key_len > kMaxKey) {
      return;
    }
    std::string key(key_len, '\0');
    if (!ReadAll(fd, key.data(), key_len, io).ok()) return;
    Deadline deadline = Deadline::After(std::chrono::milliseconds(millis));
    Status status;
    Bytes payload;
    if (op == kSet) {
      uint32_t len = 0;
      if (!ReadAll(fd, &len, 4, io).ok() || len > kMaxValue) return;
      Bytes value(len);
      if (!ReadAll(fd, value.data(), len, io).ok()) return;
      status = data_.Set(key, value, deadline);
    } else if (op == kGet) {
      auto value = data_.Get(key, deadline);
      if (value.ok()) payload = std::move(*value);
      status = value.status();
      if (value.ok()) status = Status::Ok();
    } else if (op == kAdd || op == kWait) {
      int64_t number = 0;
      if (!ReadAll(fd, &number, 8, io).ok()) return;
      if (op == kAdd) {
        auto sum = data_.Add(key, number, deadline);
        if (sum.ok()) PutU64(payload, static_cast<uint64_t>(*sum));
        status = sum.ok() ? Status::Ok() : sum.status();
      } else {
        status = data_.WaitAtLeast(key, number, deadline);
      }
    } else {
      return;
    }
    Bytes reply;
    reply.push_back(static_cast<uint8_t>(status.code()));
    if (!status.ok()) payload.assign(status.message().begin(), status.message().end());
    PutU32(reply, static_cast<uint32_t>(payload.size()));
    reply.insert(reply.end(), payload.begin(), payload.end());
    if (!WriteAll(fd, reply.data(), static_cast<int64_t>(reply.size()), io).ok()) return;
  }
}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                const std::string& token,
                                                                Deadline deadline) {
  std::string where = "store " + host + ":" + std::to_string(port);
  auto fd = ConnectTcp(host, port, deadline);
  if (!fd.ok()) return fd.status().WithContext(where);
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(*fd));
  Bytes hello(kMagic, kMagic + 4);
  PutU32(hello, static_cast<uint32_t>(token.size()));
  hello.insert(hello.end(), token.begin(), token.end());
  Status sent = WriteAll(*fd, hello.data(), static_cast<int64_t>(hello.size()), deadline);
  uint8_t answer = 0;
  Status got = sent.ok() ? ReadAll(*fd, &answer, 1, deadline) : sent;
  if (!got.ok() || answer != 'K') {
    if (got.code() == StatusCode::kDeadlineExceeded) return got.WithContext(where);
    return Unavailable(where + " rejected the connection (is FERRY_TOKEN the same on every rank?)");
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
  // The server answers by `deadline`; allow it a little longer to deliver the reply.
  Deadline io = Deadline::After(deadline.Remaining() + std::chrono::seconds(5));
  if (deadline.when() == Deadline::Clock::time_point::max()) io = Deadline::Never();
  Status status = WriteAll(fd_, request.data(), static_cast<int64_t>(request.size()), io);
  uint8_t code = 0;
  uint32_t len = 0;
  if (status.ok()) status = ReadAll(fd_, &code, 1, io);
  if (status.ok()) status = ReadAll(fd_, &len, 4, io);
  Bytes payload(status.ok() ? len : 0);
  if (status.ok()) status = ReadAll(fd_, payload.data(), len, io);
  if (!status.ok()) {
    if (closed_) return Aborted("store closed");
    return status.WithContext("store request for key '" + std::string(key) + "'");
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
