// PeerWatch (see peer_watch.h): the listening socket, the dial/accept handshake with a hello of
// (magic, epoch, rank), and close detection with poll().
#include "transports/libfabric/peer_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {
namespace {

constexpr uint32_t kHelloMagic = 0x57464546;  // "FEFW"

struct Hello {
  uint32_t magic = kHelloMagic;
  int32_t rank = 0;
  uint64_t epoch = 0;
};

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads exactly sizeof(Hello) bytes from a non-blocking socket by `deadline`.
bool ReadHello(int fd, Hello& hello, Deadline deadline) {
  size_t got = 0;
  auto* out = reinterpret_cast<char*>(&hello);
  while (got < sizeof(hello)) {
    ssize_t n = recv(fd, out + got, sizeof(hello) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    if (deadline.Expired()) return false;
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, std::min(deadline.RemainingMillis(), 50));
  }
  return hello.magic == kHelloMagic;
}

}  // namespace

PeerWatch::~PeerWatch() {
  for (auto& [rank, fd] : watched_) close(fd);
  for (auto& [rank, fd] : accepted_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status PeerWatch::Listen(const std::string& advertised_host) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Unavailable(Errno("peer watch socket"));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return Unavailable(Errno("peer watch bind"));
  }
  if (listen(listen_fd_, 128) != 0) return Unavailable(Errno("peer watch listen"));
  socklen_t length = sizeof(address);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  SetNonBlocking(listen_fd_);
  host_ = advertised_host;
  if (host_.empty()) {
    char name[256] = {};
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (gethostname(name, sizeof(name) - 1) == 0 &&
        getaddrinfo(name, nullptr, &hints, &found) == 0) {
      host_ = name;
      freeaddrinfo(found);
    } else {
      host_ = "127.0.0.1";
    }
  }
  return Status::Ok();
}

Status PeerWatch::Connect(int peer, const std::string& host, uint16_t port, Deadline deadline) {
  const std::string who = "peer " + std::to_string(peer);
  if (watched_.count(peer) != 0) return FailedPrecondition(who + " is already watched");
  if (peer == rank_) return Status::Ok();  // a process does not outlive itself
  if (peer < rank_) return AcceptFrom(peer, deadline);

  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Unavailable(who + ": cannot resolve peer watch host '" + host + "': " +
                       gai_strerror(rc));
  }
  while (true) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = connect(fd, found->ai_addr, found->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, std::max(deadline.RemainingMillis(), 0));
      int error = 0;
      socklen_t length = sizeof(error);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      rc = (p.revents & POLLOUT) && error == 0 ? 0 : -1;
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Hello hello;
      hello.rank = rank_;
      hello.epoch = epoch_;
      if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(hello))) {
        freeaddrinfo(found);
        watched_[peer] = fd;
        return Status::Ok();
      }
    }
    close(fd);
    if (deadline.Expired()) {
      freeaddrinfo(found);
      return DeadlineExceeded(who + ": peer watch connection to " + host + ":" + service +
                              " not established before the deadline");
    }
    usleep(10000);
  }
}

Status PeerWatch::AcceptFrom(int peer, Deadline deadline) {
  while (true) {
    if (auto it = accepted_.find(peer); it != accepted_.end()) {
      watched_[peer] = it->second;
      accepted_.erase(it);
      return Status::Ok();
    }
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Hello hello;
      if (ReadHello(fd, hello, deadline.Min(Deadline::AfterSeconds(5))) &&
          hello.epoch == epoch_ && hello.rank < rank_ && hello.rank >= 0 &&
          accepted_.count(hello.rank) == 0 && watched_.count(hello.rank) == 0) {
        accepted_[hello.rank] = fd;
      } else {
        close(fd);  // a stranger, another epoch, or a duplicate: refuse it
      }
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Unavailable("peer " + std::to_string(peer) + ": " + Errno("peer watch accept"));
    }
    if (deadline.Expired()) {
      return DeadlineExceeded("peer " + std::to_string(peer) +
                              ": its peer watch connection did not arrive before the deadline");
    }
    pollfd p{listen_fd_, POLLIN, 0};
    poll(&p, 1, std::min(deadline.RemainingMillis(), 50));
  }
}

std::vector<int> PeerWatch::PollGone() {
  std::vector<int> gone;
  if (watched_.empty()) return gone;
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (auto& [rank, fd] : watched_) {
    fds.push_back(pollfd{fd, POLLIN, 0});
    ranks.push_back(rank);
  }
  if (poll(fds.data(), fds.size(), 0) <= 0) return gone;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    char scratch[64];
    ssize_t n = recv(fds[i].fd, scratch, sizeof(scratch), 0);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;  // stray bytes
    close(fds[i].fd);
    watched_.erase(ranks[i]);
    gone.push_back(ranks[i]);
  }
  return gone;
}

}  // namespace ferry
