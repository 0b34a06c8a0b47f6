// PeerWatch (see peer_watch.h): the listening socket, the dial/accept handshake with the rank
// hello, close detection with poll(), and the control frames ('H' heartbeat, 'B' goodbye,
// 'A' + 4-byte little-endian reason length + 4-byte lost rank or -1 + reason: abort).
#include "core/runtime/peer_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/runtime/rank_hello.h"
#include "core/runtime/socket_util.h"

namespace ferry {
namespace {

constexpr RankHelloProtocol kWatchHello{{'F', 'E', 'F', 'W'}, "ferry-libfabric-watch"};
constexpr uint8_t kHeartbeat = 'H';
constexpr uint8_t kBye = 'B';
constexpr uint8_t kAbort = 'A';
constexpr size_t kAbortHeader = 1 + 4 + 4;  // 'A', u32 reason length, i32 lost rank

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
  heard_at_[peer] = std::chrono::steady_clock::now();
  return Status::Ok();
}

Status PeerWatch::AcceptFrom(int peer, Deadline deadline) {
  while (true) {
    if (auto it = accepted_.find(peer); it != accepted_.end()) {
      watched_[peer] = it->second;
      heard_at_[peer] = std::chrono::steady_clock::now();
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
  for (const Event& event : Poll(0)) {
    if (event.kind == Event::kGone) gone.push_back(event.rank);
  }
  return gone;
}

void PeerWatch::SendFrame(const std::vector<uint8_t>& frame) {
  for (auto& [rank, fd] : watched_) {
    (void)send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void PeerWatch::SendHeartbeat() { SendFrame({kHeartbeat}); }
void PeerWatch::SendBye() { SendFrame({kBye}); }

void PeerWatch::SendAbort(const std::string& reason, int lost_rank) {
  const uint32_t length = static_cast<uint32_t>(std::min(reason.size(), kMaxReason));
  const int32_t lost = lost_rank;
  std::vector<uint8_t> frame(kAbortHeader + length);
  frame[0] = kAbort;
  std::memcpy(frame.data() + 1, &length, 4);
  std::memcpy(frame.data() + 5, &lost, 4);
  if (length > 0) std::memcpy(frame.data() + kAbortHeader, reason.data(), length);
  SendFrame(frame);
}

bool PeerWatch::ParseFrames(int peer, std::vector<Event>& events) {
  std::vector<uint8_t>& in = inbox_[peer];
  size_t at = 0;
  while (at < in.size()) {
    if (in[at] == kHeartbeat) {
      ++at;
    } else if (in[at] == kBye) {
      events.push_back(Event{Event::kBye, peer, ""});
      ++at;
    } else if (in[at] == kAbort) {
      if (in.size() - at < kAbortHeader) break;
      uint32_t length = 0;
      int32_t lost = -1;
      std::memcpy(&length, in.data() + at + 1, 4);
      std::memcpy(&lost, in.data() + at + 5, 4);
      if (length > kMaxReason || lost < -1 || lost >= size_) return false;
      if (in.size() - at - kAbortHeader < length) break;
      const char* text = reinterpret_cast<const char*>(in.data() + at + kAbortHeader);
      events.push_back(Event{Event::kAbort, peer, std::string(text, length), lost});
      at += kAbortHeader + length;
    } else {
      return false;
    }
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
  return true;
}

std::vector<PeerWatch::Event> PeerWatch::Poll(int timeout_ms, int wake_fd) {
  std::vector<Event> events;
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (auto& [rank, fd] : watched_) {
    fds.push_back(pollfd{fd, POLLIN, 0});
    ranks.push_back(rank);
  }
  const size_t peers = fds.size();
  if (wake_fd >= 0) fds.push_back(pollfd{wake_fd, POLLIN, 0});
  if (fds.empty() || poll(fds.data(), fds.size(), timeout_ms) <= 0) return events;
  for (size_t i = 0; i < peers; ++i) {
    if (fds[i].revents == 0) continue;
    const int rank = ranks[i];
    uint8_t scratch[4096];
    ssize_t n = recv(fds[i].fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    bool closed = n <= 0;
    if (!closed) {
      heard_at_[rank] = std::chrono::steady_clock::now();
      inbox_[rank].insert(inbox_[rank].end(), scratch, scratch + n);
      closed = !ParseFrames(rank, events);  // a malformed frame: treat the peer as gone
    }
    const bool bye = !events.empty() && events.back().rank == rank &&
                     events.back().kind == Event::kBye;
    if (closed) events.push_back(Event{Event::kGone, rank, ""});
    if (closed || bye) {
      close(fds[i].fd);
      watched_.erase(rank);
      heard_at_.erase(rank);
      inbox_.erase(rank);
    }
  }
  return events;
}

std::chrono::steady_clock::time_point PeerWatch::heard_at(int peer) const {
  auto it = heard_at_.find(peer);
  return it == heard_at_.end() ? std::chrono::steady_clock::time_point{} : it->second;
}

std::vector<int> PeerWatch::watched() const {
  std::vector<int> ranks;
  for (auto& [rank, fd] : watched_) ranks.push_back(rank);
  return ranks;
}

}  // namespace ferry
