// POSIX socket helpers with deadlines.
#include "core/runtime/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace ferry {

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<sockaddr_in> Resolve(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Unavailable("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

// Waits for `events` on fd until the deadline: 1 ready (or woken through `wake`), 0 timed out;
// kAborted when `wake` cuts the wait short.
Result<int> WaitFor(int fd, short events, Deadline deadline, const SocketWake* wake = nullptr) {
  while (true) {
    pollfd p[2] = {{fd, events, 0}, {wake != nullptr ? wake->fd : -1, POLLIN, 0}};
    int rc = ::poll(p, wake != nullptr ? 2 : 1, deadline.RemainingMillis());
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return IoError(Errno("poll"));
    if (wake != nullptr) {
      if (p[1].revents != 0) {
        uint64_t count = 0;  // reset first, then look: a wake-up after this read wakes the next poll
        (void)!::read(wake->fd, &count, sizeof(count));
      }
      if (wake->cut && wake->cut()) return Aborted("cut short");
    }
    if (rc == 0) return deadline.Expired() ? 0 : -1;
    return 1;
  }
}

}  // namespace

Result<Listener> ListenTcp(const std::string& host, int port) {
  if (host.empty()) {
    return InvalidArgument("listening needs an address: name the interface (\"0.0.0.0\" for all)");
  }
  FERRY_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(Errno("socket"));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Unavailable(Errno("bind " + host + ":" + std::to_string(port)));
    ::close(fd);
    return s;
  }
  if (::listen(fd, kListenBacklog) != 0) {
    Status s = IoError(Errno("listen"));
    ::close(fd);
    return s;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return Listener{fd, ntohs(addr.sin_port)};
}

Result<int> ConnectTcp(const std::string& host, int port, Deadline deadline, bool retry_refused) {
  FERRY_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  std::string last_error = "no attempt";
  while (!deadline.Expired()) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return IoError(Errno("socket"));
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      auto ready = WaitFor(fd, POLLOUT, deadline);
      if (!ready.ok() || *ready != 1) {
        ::close(fd);
        if (!ready.ok()) return ready.status();
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      rc = error == 0 ? 0 : -1;
      errno = error;
    }
    if (rc == 0) {
      int flags = ::fcntl(fd, F_GETFL);
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
    if (!retry_refused) {
      return Unavailable("connecting to " + host + ":" + std::to_string(port) + ": " + last_error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return DeadlineExceeded("cannot connect to " + host + ":" + std::to_string(port) +
                          " before the deadline (last error: " + last_error + ")");
}

Result<int> AcceptTcp(int listen_fd, Deadline deadline) {
  FERRY_ASSIGN_OR_RETURN(int ready, WaitFor(listen_fd, POLLIN, deadline));
  if (ready != 1) return -1;
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return -1;
    return IoError(Errno("accept"));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

Status WriteAll(int fd, const void* data, int64_t bytes, Deadline deadline, const SocketWake* wake) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, static_cast<size_t>(bytes), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      FERRY_ASSIGN_OR_RETURN(int ready, WaitFor(fd, POLLOUT, deadline, wake));
      if (ready == 0) return DeadlineExceeded("socket write timed out");
      continue;
    }
    return Unavailable(Errno("socket write"));
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, int64_t bytes, Deadline deadline, const SocketWake* wake) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, static_cast<size_t>(bytes), MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= n;
      continue;
    }
    if (n == 0) return Unavailable("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      FERRY_ASSIGN_OR_RETURN(int ready, WaitFor(fd, POLLIN, deadline, wake));
      if (ready == 0) return DeadlineExceeded("socket read timed out");
      continue;
    }
    return Unavailable(Errno("socket read"));
  }
  return Status::Ok();
}

Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return IoError(Errno("fcntl"));
  return Status::Ok();
}

std::string LocalAddress() {
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    if (ntohl(in->sin_addr.s_addr) >> 24 == 127) continue;
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    found = text;
    break;
  }
  ::freeifaddrs(list);
  return found;
}

std::string HostName() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace ferry
