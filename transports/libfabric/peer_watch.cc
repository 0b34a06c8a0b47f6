// PeerWatch (see peer_watch.h): the listening socket, the dial/accept handshake with the rank
// hello, and close detection with poll().
#include "transports/libfabric/peer_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/runtime/rank_hello.h"
#include "core/runtime/socket_util.h"

namespace ferry {
namespace {

constexpr RankHelloProtocol kWatchHello{{'F', 'E', 'F', 'W'}, "ferry-libfabric-watch"};

}  // namespace

PeerWatch::~PeerWatch() {
  acceptor_.reset();
  for (auto& [rank, fd] : watched_) close(fd);
  for (auto& [rank, fd] : accepted_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status PeerWatch::Listen(const std::string& advertised_host) {
  if (secret_.empty()) return InvalidArgument("peer watch: no secret to authenticate peers with");
  host_ = advertised_host.empty() ? LocalAddress() : advertised_host;
  auto listener = ListenTcp(host_, 0);
  if (!listener.ok()) return listener.status().WithContext("peer watch listening on " + host_);
  listen_fd_ = listener->fd;
  port_ = static_cast<uint16_t>(listener->port);
  RankHelloExpect expect{&secret_, rank_, size_, epoch_};
  acceptor_ = std::make_unique<HandshakeAcceptor>(
      listen_fd_,
      RankHelloOptions(kWatchHello, "libfabric peer watch of rank " + std::to_string(rank_)),
      [this, expect](const Nonce& nonce, std::span<const uint8_t> hello) -> Result<Bytes> {
        FERRY_ASSIGN_OR_RETURN(RankHelloChecked checked,
                               CheckRankHello(kWatchHello, expect, nonce, hello));
        if (accepted_.count(checked.from_rank) != 0 || watched_.count(checked.from_rank) != 0) {
          return FailedPrecondition("rank " + std::to_string(checked.from_rank) +
                                    " is already watched");
        }
        return checked.ack;
      });
  return Status::Ok();
}

Status PeerWatch::Connect(int peer, const std::string& host, uint16_t port, Deadline deadline) {
  const std::string who = "peer " + std::to_string(peer);
  if (watched_.count(peer) != 0) return FailedPrecondition(who + " is already watched");
  if (peer == rank_) return Status::Ok();  // a process does not outlive itself
  if (peer < rank_) return AcceptFrom(peer, deadline);
  auto fd = ConnectTcp(host, port, deadline);
  if (!fd.ok()) return fd.status().WithContext(who + ": peer watch connection");
  Status proved = ProveRank(*fd, kWatchHello, secret_, rank_, peer, epoch_, deadline);
  if (proved.ok()) proved = SetNonBlocking(*fd);
  if (!proved.ok()) {
    close(*fd);
    return proved.WithContext(who + ": peer watch connection to " + host + ":" +
                              std::to_string(port));
  }
  watched_[peer] = *fd;
  return Status::Ok();
}

Status PeerWatch::AcceptFrom(int peer, Deadline deadline) {
  while (true) {
    if (auto it = accepted_.find(peer); it != accepted_.end()) {
      watched_[peer] = it->second;
      accepted_.erase(it);
      return Status::Ok();
    }
    auto accepted = acceptor_->Next(deadline);
    if (!accepted.ok()) return accepted.status().WithContext("peer " + std::to_string(peer));
    if (accepted->fd < 0) {
      return DeadlineExceeded("peer " + std::to_string(peer) +
                              ": its peer watch connection did not arrive before the deadline");
    }
    uint32_t from = 0;
    std::memcpy(&from, accepted->hello.data(), 4);
    accepted_[static_cast<int>(from)] = accepted->fd;
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
    ssize_t n = recv(fds[i].fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;  // stray bytes
    close(fds[i].fd);
    watched_.erase(ranks[i]);
    gone.push_back(ranks[i]);
  }
  return gone;
}

}  // namespace ferry
