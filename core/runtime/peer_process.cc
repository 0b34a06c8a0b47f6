// Peer processes (see peer_process.h): abstract Unix-socket listeners, the rank hello over them,
// and the kernel's credentials of each authenticated connection.
#include "core/runtime/peer_process.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "core/runtime/handshake.h"
#include "core/runtime/rank_hello.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5+, include/uapi/asm-generic/socket.h
#endif

namespace ferry {
namespace {

constexpr RankHelloProtocol kNodeHello{{'F', 'R', 'Y', 'N'}, "ferry-node-identity"};

// The abstract-namespace address "\0<name>" (no file, gone with its last socket).
Result<std::pair<sockaddr_un, socklen_t>> AbstractAddress(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr.sun_path)) {
    return InvalidArgument("node socket name of " + std::to_string(name.size()) + " bytes");
  }
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  return std::make_pair(addr, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
}

std::string ListenerName(const PeerProcessOptions& o, int rank) {
  return o.socket_name + "/" + std::to_string(rank);
}

// A pidfd of the process at the other end of `fd`: the kernel's own (SO_PEERPIDFD) or, on older
// kernels, one opened from SO_PEERCRED's pid while the connection is up.
Result<std::pair<int64_t, int>> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Unavailable(std::string("SO_PEERCRED: ") + std::strerror(errno));
  }
  int pidfd = -1;
  len = sizeof(pidfd);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) {
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0));
  }
  if (pidfd < 0) return Unavailable("pidfd of process " + std::to_string(cred.pid) + ": " + std::strerror(errno));
  return std::make_pair(static_cast<int64_t>(cred.pid), pidfd);
}

}  // namespace

Result<std::unique_ptr<PeerProcesses>> PeerProcesses::Connect(PeerProcessOptions options,
                                                              Deadline deadline) {
  if (options.secret.empty()) return InvalidArgument("peer processes: no secret to authenticate peers with");
  std::unique_ptr<PeerProcesses> processes(new PeerProcesses(std::move(options)));
  const PeerProcessOptions& o = processes->options_;
  FERRY_ASSIGN_OR_RETURN(auto address, AbstractAddress(ListenerName(o, o.rank)));
  processes->listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (processes->listen_fd_ < 0 ||
      ::bind(processes->listen_fd_, reinterpret_cast<sockaddr*>(&address.first), address.second) != 0 ||
      ::listen(processes->listen_fd_, 128) != 0) {
    return Unavailable("node socket of rank " + std::to_string(o.rank) + ": " + std::strerror(errno));
  }
  for (int peer : o.peers) {
    if (peer > o.rank) FERRY_RETURN_IF_ERROR(processes->Dial(peer, deadline));
  }
  FERRY_RETURN_IF_ERROR(processes->AcceptLower(deadline));
  ::close(std::exchange(processes->listen_fd_, -1));
  return processes;
}

PeerProcesses::~PeerProcesses() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (auto& [rank, v] : verified_) ::close(v.pidfd);
}

Status PeerProcesses::Dial(int peer, Deadline deadline) {
  const std::string who = "node socket of peer " + std::to_string(peer);
  FERRY_ASSIGN_OR_RETURN(auto address, AbstractAddress(ListenerName(options_, peer)));
  while (true) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Unavailable(who + ": " + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address.first), address.second) == 0) {
      Status proved = ProveRank(fd, kNodeHello, options_.secret, options_.rank, peer, options_.epoch, deadline);
      Status bound = proved.ok() ? Bind(peer, fd) : proved;
      ::close(fd);
      return bound.WithContext(who);
    }
    const int error = errno;
    ::close(fd);
    if (error != ECONNREFUSED && error != ENOENT && error != EAGAIN) {
      return Unavailable(who + ": " + std::strerror(error));
    }
    if (deadline.Expired()) return DeadlineExceeded(who + ": not listening by the deadline");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the peer has not listened yet
  }
}

Status PeerProcesses::AcceptLower(Deadline deadline) {
  RankHelloExpect expect{&options_.secret, options_.rank, options_.size, options_.epoch};
  HandshakeAcceptor acceptor(
      listen_fd_, RankHelloOptions(kNodeHello, "node socket of rank " + std::to_string(options_.rank)),
      [&](const Nonce& nonce, std::span<const uint8_t> hello) -> Result<Bytes> {
        FERRY_ASSIGN_OR_RETURN(RankHelloChecked checked, CheckRankHello(kNodeHello, expect, nonce, hello));
        if (std::find(options_.peers.begin(), options_.peers.end(), checked.from_rank) ==
            options_.peers.end()) {
          return FailedPrecondition("rank " + std::to_string(checked.from_rank) + " is not on this node");
        }
        if (verified_.count(checked.from_rank) != 0) {
          return FailedPrecondition("rank " + std::to_string(checked.from_rank) + " is already verified");
        }
        return checked.ack;
      });
  for (int peer : options_.peers) {
    while (peer < options_.rank && verified_.count(peer) == 0) {
      FERRY_ASSIGN_OR_RETURN(HandshakeAcceptor::Accepted next, acceptor.Next(deadline));
      if (next.fd < 0) {
        return DeadlineExceeded("node socket of rank " + std::to_string(options_.rank) + ": peer " +
                                std::to_string(peer) + " did not prove its rank by the deadline");
      }
      uint32_t from = 0;
      std::memcpy(&from, next.hello.data(), sizeof(from));
      Status bound = Bind(static_cast<int>(from), next.fd);
      ::close(next.fd);
      FERRY_RETURN_IF_ERROR(bound.WithContext("node socket of peer " + std::to_string(from)));
    }
  }
  return Status::Ok();
}

Status PeerProcesses::Bind(int peer, int fd) {
  FERRY_ASSIGN_OR_RETURN(auto pid_and_fd, PeerOf(fd));
  verified_[peer] = Verified{pid_and_fd.first, pid_and_fd.second};
  return Status::Ok();
}

Result<int64_t> PeerProcesses::Pid(int peer) const {
  auto it = verified_.find(peer);
  if (it == verified_.end()) {
    return FailedPrecondition("rank " + std::to_string(peer) +
                              " is not a verified same-node peer of rank " + std::to_string(options_.rank));
  }
  return it->second.pid;
}

Result<int> PeerProcesses::PidFd(int peer) const {
  FERRY_RETURN_IF_ERROR(Pid(peer).status());
  return verified_.at(peer).pidfd;
}

Status PeerProcesses::CheckAlive(int peer) const {
  auto it = verified_.find(peer);
  if (it == verified_.end()) return Pid(peer).status();
  pollfd p{it->second.pidfd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 0) return Status::Ok();
  return Unavailable("rank " + std::to_string(peer) + "'s process " + std::to_string(it->second.pid) +
                     " exited (its pid may now name another process)");
}

}  // namespace ferry
