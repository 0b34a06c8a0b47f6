// TcpStoreServer and TcpStoreClient.
#include "core/runtime/tcp_store.h"

#include <poll.h>
#include <sys/eventfd.h>
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

// Whether the client of `fd` gave up the request it is waiting for: it hung up, or sent bytes
// before its answer (an interrupted TcpStoreClient drops its connection; no client pipelines).
bool ClientLeft(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Runs `wait(slice)` (a wait of the in-memory store) in slices of kHangupCheck until it ends other
// than by its slice, `deadline` passes, or the client left: then `left` is set and the caller
// ends the connection, so that an abandoned wait does not hold a worker and a connection slot
// until its deadline.
template <typename Wait>
Status WaitWhileConnected(int fd, Deadline deadline, bool& left, Wait wait) {
  while (true) {
    Status status = wait(deadline.Min(Deadline::After(kStoreHangupCheck)));
    if (status.code() != StatusCode::kDeadlineExceeded || deadline.Expired()) return status;
    if (ClientLeft(fd)) {
      left = true;
      return Unavailable("store: the client left during its wait");
    }
  }
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
  bool left = false;  // the client gave up a wait: no answer, the connection ends
  if (op == kSet) {
    uint32_t len = 0;
    FERRY_RETURN_IF_ERROR(ReadAll(fd, &len, 4, io));
    if (len > kMaxValue) return InvalidArgument("store: value over the limit");
    Bytes value(len);
    FERRY_RETURN_IF_ERROR(ReadAll(fd, value.data(), len, io));
    status = data_.Set(key, value, deadline);
  } else if (op == kGet) {
    status = WaitWhileConnected(fd, deadline, left, [&](Deadline slice) {
      auto value = data_.Get(key, slice);
      if (value.ok()) payload = std::move(*value);
      return value.status();
    });
  } else {
    int64_t number = 0;
    FERRY_RETURN_IF_ERROR(ReadAll(fd, &number, 8, io));
    if (op == kAdd) {
      auto sum = data_.Add(key, number, deadline);
      if (sum.ok()) PutU64(payload, static_cast<uint64_t>(*sum));
      status = sum.status();
    } else {
      status = WaitWhileConnected(fd, deadline, left,
                                  [&](Deadline slice) { return data_.WaitAtLeast(key, number, slice); });
    }
  }
  if (left) return status;
  Bytes reply;
  reply.push_back(static_cast<uint8_t>(status.code()));
  if (!status.ok()) payload.assign(status.message().begin(), status.message().end());
  PutU32(reply, static_cast<uint32_t>(payload.size()));
  reply.insert(reply.end(), payload.begin(), payload.end());
  return WriteAll(fd, reply.data(), static_cast<int64_t>(reply.size()), io);
}

TcpStoreClient::TcpStoreClient(std::string host, int port, std::string token,
                               std::chrono::duration<double> reply_grace)
    : host_(std::move(host)),
      port_(port),
      token_(std::move(token)),
      where_("store " + host_ + ":" + std::to_string(port_)),
      reply_grace_(reply_grace),
      job_secret_([this] {
        const Digest secret = HmacSha256(token_, "ferry-job-secret");
        return std::string(secret.begin(), secret.end());
      }()) {}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                const std::string& token,
                                                                Deadline deadline,
                                                                std::chrono::duration<double> reply_grace) {
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(host, port, token, reply_grace));
  client->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (client->wake_fd_ < 0) return IoError(std::string("eventfd: ") + std::strerror(errno));
  FERRY_ASSIGN_OR_RETURN(client->fd_, client->Open(deadline, /*retry_refused=*/true));
  return client;
}

Result<int> TcpStoreClient::Open(Deadline deadline, bool retry_refused) const {
  auto fd = ConnectTcp(host_, port_, deadline, retry_refused);
  if (!fd.ok()) return fd.status().WithContext(where_);
  const Nonce client_nonce = RandomNonce();
  Bytes hello;
  auto reply = ClientHandshake(
      *fd, kMagic,
      [&](const Nonce& nonce) { return hello = MakeStoreHello(token_, nonce, client_nonce); },
      32, deadline);
  Status status;
  if (!reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded) {
    status = reply.status().WithContext(where_);
  } else if (!reply.ok()) {
    status = Unavailable(where_ + " rejected the connection (is FERRY_TOKEN the same on every rank?): " +
                         reply.status().message());
  } else if (!DigestEqual(ToDigest(reply->reply), ToDigest(StoreHelloAck(token_, reply->nonce, hello)))) {
    status = Unavailable(where_ + " answered without proof of the token: not this job's store");
  }
  if (status.ok()) return *fd;
  ::close(*fd);
  return status;
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void TcpStoreClient::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  { std::lock_guard<std::mutex> lock(mu_); }  // a request between its check and its wait has it
  turn_.notify_all();
}

void TcpStoreClient::Close() {
  closed_ = true;
  Wake();
}

bool TcpStoreClient::Cut(const StoreInterrupt* interrupt) const {
  return closed_ || (interrupt != nullptr && interrupt->fired());
}

Status TcpStoreClient::Transfer(bool out, void* data, int64_t bytes, Deadline deadline,
                                StoreInterrupt* interrupt, bool& cut) {
  const SocketWake wake{wake_fd_, [&] { return Cut(interrupt); }};
  Status status = out ? WriteAll(fd_, data, bytes, deadline, &wake) : ReadAll(fd_, data, bytes, deadline, &wake);
  cut = status.code() == StatusCode::kAborted;
  return status;
}

Result<Bytes> TcpStoreClient::Exchange(uint8_t op, std::string_view key, const Bytes& request,
                                       Deadline deadline, StoreInterrupt* interrupt, Ended& how) {
  how = Ended::kLost;
  bool cut = false;
  const auto grace = std::chrono::duration_cast<Deadline::Clock::duration>(reply_grace_);
  if (fd_ < 0) {
    // An interrupt dropped the last connection; a hung host answers no handshake within `grace`.
    // The handshake gets `grace` even when the request's own deadline is shorter (a request that
    // only looks, such as Communicator::Barrier's check after an abort, has none at all).
    auto fd = Open(Deadline::After(grace), /*retry_refused=*/false);
    if (!fd.ok()) return fd.status().WithContext("reconnecting after an interrupted request");
    fd_ = *fd;
  }
  // The server answers by `deadline` (Set and Add at once); a reply later than `grace` beyond
  // that means the host is stopped, hung or unreachable.
  Deadline io = Deadline::After(deadline.Remaining() + grace);
  if (deadline.when() == Deadline::Clock::time_point::max()) io = Deadline::Never();
  Status status = Transfer(true, const_cast<uint8_t*>(request.data()), static_cast<int64_t>(request.size()), io,
                           interrupt, cut);
  if (op == kSet || op == kAdd) io = Deadline::After(grace);
  uint8_t code = 0;
  uint32_t len = 0;
  if (status.ok()) status = Transfer(false, &code, 1, io, interrupt, cut);
  if (status.code() == StatusCode::kDeadlineExceeded) {
    status = DeadlineExceeded("no reply from the " + where_ + " within " +
                              std::to_string(reply_grace_.count()) +
                              " s beyond the request's deadline (its host is stopped, hung or unreachable)");
  }
  if (status.ok()) status = Transfer(false, &len, 4, io, interrupt, cut);
  if (status.ok() && len > kMaxValue + kMaxKey) {
    status = IoError("store reply of " + std::to_string(len) + " bytes is over the limit");
  }
  Bytes payload(status.ok() ? len : 0);
  if (status.ok()) status = Transfer(false, payload.data(), len, io, interrupt, cut);
  if (cut) how = Ended::kCut;
  if (!status.ok()) return status.WithContext("request for key '" + std::string(key) + "' to the " + where_);
  how = Ended::kReplied;
  if (code != 0) return Status(static_cast<StatusCode>(code), std::string(payload.begin(), payload.end()));
  return payload;
}

Result<Bytes> TcpStoreClient::Request(uint8_t op, std::string_view key, const Bytes& body,
                                      Deadline deadline, StoreInterrupt* interrupt) {
  if (closed_) return Aborted("store closed");
  Bytes request;
  request.push_back(op);
  PutU64(request, MillisLeft(deadline));
  PutU32(request, static_cast<uint32_t>(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  request.insert(request.end(), body.begin(), body.end());
  // Registered before mu_ is taken: the interrupt's lock comes before mu_ (Fire calls Wake).
  StoreInterrupt::Listener listener(interrupt, [this] { Wake(); });
  bool mine = false;  // this request took its turn on the connection
  {
    std::unique_lock<std::mutex> lock(mu_);
    turn_.wait(lock, [&] { return !busy_ || Cut(interrupt); });
    if (!busy_) {
      if (!broken_.ok()) return broken_;
      busy_ = mine = true;
    }
  }
  Ended how = Ended::kCut;
  Result<Bytes> reply = Aborted("cut short");
  const bool sent = mine && !Cut(interrupt);  // else the connection stays as it was, in step
  if (sent) reply = Exchange(op, key, request, deadline, interrupt, how);
  if (mine) {
    if (sent && how != Ended::kReplied && fd_ >= 0) {
      // Cut: the server will still answer, maybe only at the deadline; lost: a reply may still be
      // on its way. Either way later requests must not read it as theirs.
      ::close(fd_);
      fd_ = -1;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Named by address: with an external store no rank's death explains its loss.
      if (how == Ended::kLost && !closed_) {
        broken_ = reply.status().WithContext("an earlier request to the " + where_);
      }
      busy_ = false;
    }
    turn_.notify_all();
  }
  if (how == Ended::kReplied) return reply;
  if (closed_) return Aborted("store closed");
  if (how == Ended::kCut) return interrupt->reason();
  return reply;
}

Status TcpStoreClient::Set(std::string_view key, std::span<const uint8_t> value,
                           Deadline deadline) {
  Bytes body;
  PutU32(body, static_cast<uint32_t>(value.size()));
  body.insert(body.end(), value.begin(), value.end());
  return Request(kSet, key, body, deadline, nullptr).status();
}

Result<Bytes> TcpStoreClient::Get(std::string_view key, Deadline deadline, StoreInterrupt* interrupt) {
  return Request(kGet, key, {}, deadline, interrupt);
}

Result<int64_t> TcpStoreClient::Add(std::string_view key, int64_t delta, Deadline deadline) {
  Bytes body;
  PutU64(body, static_cast<uint64_t>(delta));
  FERRY_ASSIGN_OR_RETURN(Bytes reply, Request(kAdd, key, body, deadline, nullptr));
  if (reply.size() != 8) return Internal("store: malformed counter reply");
  int64_t value = 0;
  std::memcpy(&value, reply.data(), 8);
  return value;
}

Status TcpStoreClient::WaitAtLeast(std::string_view key, int64_t target, Deadline deadline,
                                   StoreInterrupt* interrupt) {
  Bytes body;
  PutU64(body, static_cast<uint64_t>(target));
  return Request(kWait, key, body, deadline, interrupt).status();
}

}  // namespace ferry
