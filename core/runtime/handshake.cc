// HandshakeAcceptor (poll over the listener and every open handshake) and ClientHandshake.
#include "core/runtime/handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/base/hmac.h"
#include "core/runtime/socket_util.h"

namespace ferry {

namespace {

constexpr size_t kChallengeBytes = 4 + 16;
constexpr int kAcceptPerRound = 256;  // bounds one round's work under a flood

// address:port for TCP; the process id the kernel reports for a Unix-domain socket.
std::string PeerAddress(int fd) {
  sockaddr_storage storage{};
  socklen_t len = sizeof(storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&storage), &len) != 0) return "unknown peer";
  if (storage.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t cred_len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) return "a local process";
    return "local process " + std::to_string(cred.pid);
  }
  const auto& addr = reinterpret_cast<const sockaddr_in&>(storage);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace

HandshakeAcceptor::HandshakeAcceptor(int listen_fd, HandshakeOptions options,
                                     HandshakeVerifier verify)
    : listen_fd_(listen_fd), options_(std::move(options)), verify_(std::move(verify)) {
  // AcceptNew drains the backlog until accept would block: it must not block.
  (void)SetNonBlocking(listen_fd_);
}

HandshakeAcceptor::~HandshakeAcceptor() {
  for (Pending& p : pending_) ::close(p.fd);
}

void HandshakeAcceptor::Reject(Pending& p, const std::string& why) {
  int count = ++rejected_;
  if (count <= options_.log_first) {
    std::fprintf(stderr, "ferry: %s refused a connection from %s: %s\n", options_.what.c_str(),
                 p.peer.c_str(), why.c_str());
  } else if (count == options_.log_first + 1) {
    std::fprintf(stderr, "ferry: %s refuses more connections; no longer logging each one\n",
                 options_.what.c_str());
  }
  ::close(p.fd);
  p.fd = -1;
}

void HandshakeAcceptor::AcceptNew() {
  for (int i = 0; i < kAcceptPerRound; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN (none left) or a transient error; the next poll retries
    Pending p;
    p.fd = fd;
    p.peer = PeerAddress(fd);
    p.nonce = RandomNonce();
    p.expires = std::chrono::steady_clock::now() + options_.hello_timeout;
    uint8_t challenge[kChallengeBytes];
    std::memcpy(challenge, options_.magic.data(), 4);
    std::memcpy(challenge + 4, p.nonce.data(), 16);
    // A fresh socket's send buffer is empty: the challenge goes out whole or the peer is gone.
    if (::send(fd, challenge, kChallengeBytes, MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(kChallengeBytes)) {
      Reject(p, "cannot send the challenge");
      continue;
    }
    if (static_cast<int>(pending_.size()) >= options_.max_pending) {
      // The oldest is the likeliest to be silent: real peers answer within a round trip.
      Reject(pending_.front(), "dropped: " + std::to_string(options_.max_pending) +
                                   " handshakes open (the cap) and this one is the oldest");
      pending_.erase(pending_.begin());
    }
    pending_.push_back(std::move(p));
  }
}

bool HandshakeAcceptor::Advance(Pending& p, Accepted& out) {
  uint8_t buffer[512];
  while (p.hello.size() < options_.hello_bytes) {
    size_t want = std::min(sizeof(buffer), options_.hello_bytes - p.hello.size());
    ssize_t n = ::recv(p.fd, buffer, want, MSG_DONTWAIT);
    if (n > 0) {
      p.hello.insert(p.hello.end(), buffer, buffer + n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    Reject(p, n == 0 ? "closed before its hello" : std::string("read: ") + std::strerror(errno));
    return true;
  }
  auto reply = verify_(p.nonce, p.hello);
  if (!reply.ok()) {
    Reject(p, reply.status().message());
    return true;
  }
  Status sent = WriteAll(p.fd, reply->data(), static_cast<int64_t>(reply->size()),
                         Deadline::AfterSeconds(1));
  if (!sent.ok()) {
    Reject(p, "cannot send the reply: " + sent.message());
    return true;
  }
  int one = 1;
  ::setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  out.fd = p.fd;
  out.hello = std::move(p.hello);
  p.fd = -1;
  return true;
}

void HandshakeAcceptor::DropExpired() {
  auto now = std::chrono::steady_clock::now();
  for (Pending& p : pending_) {
    if (p.expires <= now) Reject(p, "no hello within the handshake timeout");
  }
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
}

Result<HandshakeAcceptor::Accepted> HandshakeAcceptor::Next(Deadline deadline) {
  while (true) {
    DropExpired();
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    auto wake = deadline.when();
    for (const Pending& p : pending_) {
      fds.push_back({p.fd, POLLIN, 0});
      wake = std::min(wake, p.expires);
    }
    auto now = std::chrono::steady_clock::now();
    int timeout = wake <= now ? 0
                              : static_cast<int>(std::min<int64_t>(
                                    std::chrono::ceil<std::chrono::milliseconds>(wake - now).count(),
                                    1000));
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) return IoError(std::string("poll: ") + std::strerror(errno));
    Accepted out;
    // Handshakes first (by position: AcceptNew may append or drop the oldest afterwards).
    for (size_t i = 1; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pending& p = pending_[i - 1];
      if (p.fd >= 0 && Advance(p, out) && out.fd >= 0) break;
    }
    std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
    if (out.fd >= 0) return out;
    if (rc > 0 && fds[0].revents != 0) AcceptNew();
    if (deadline.Expired()) return Accepted{};
  }
}

PairAuthenticator DerivePairAuthenticator(const std::string& secret, std::string_view transport,
                                          int from, int to) {
  std::string message = "ferry-pair/" + std::string(transport) + "/" + std::to_string(from) + "->" +
                        std::to_string(to);
  Digest mac = HmacSha256(secret, message);
  PairAuthenticator out;
  std::memcpy(out.data(), mac.data(), out.size());
  return out;
}

Result<HandshakeReply> ClientHandshake(int fd, const Magic& magic,
                                       const std::function<Bytes(const Nonce&)>& make_hello,
                                       size_t reply_bytes, Deadline deadline) {
  uint8_t challenge[kChallengeBytes];
  FERRY_RETURN_IF_ERROR(ReadAll(fd, challenge, kChallengeBytes, deadline)
                            .WithContext("reading the listener's challenge"));
  if (std::memcmp(challenge, magic.data(), 4) != 0) {
    return Unavailable("the listener does not speak this protocol (wrong magic in its challenge)");
  }
  HandshakeReply out;
  std::memcpy(out.nonce.data(), challenge + 4, 16);
  Bytes hello = make_hello(out.nonce);
  FERRY_RETURN_IF_ERROR(WriteAll(fd, hello.data(), static_cast<int64_t>(hello.size()), deadline));
  out.reply.resize(reply_bytes);
  Status got = ReadAll(fd, out.reply.data(), static_cast<int64_t>(reply_bytes), deadline);
  if (got.code() == StatusCode::kUnavailable) {
    return Unavailable("the listener refused our hello (closed the connection)");
  }
  FERRY_RETURN_IF_ERROR(got);
  return out;
}

}  // namespace ferry
