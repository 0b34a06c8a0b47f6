// PeerWatch: one authenticated TCP connection per peer beside the data path, to notice when a peer
// process dies and to carry small control frames (heartbeats, a goodbye, an abort reason).
//
// Fabrics do not always report a dead peer (libfabric's connectionless FI_EP_RDM endpoints give no
// error to a receiver whose sender died), and no fabric reports a stopped one. The kernel closes
// a watch connection when the peer's process exits, which PeerWatch reports as the peer being
// gone; PeerMonitor (peer_monitor.h) adds heartbeats on top to catch a hung peer. Connections open with the rank hello
// (core/runtime/rank_hello.h): a connection that does not prove this communicator epoch's secret,
// or claims an unexpected rank, is closed and logged and never watched.
//
// Threading: one thread at a time (a transport's progress thread, or PeerMonitor's). Blocking:
// Connect waits until its deadline, Poll up to its timeout; nothing else blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/handshake.h"

namespace ferry {

class PeerWatch {
 public:
  // `secret`: the communicator's (TransportContext::secret); must not be empty.
  PeerWatch(int rank, int size, uint64_t epoch, std::string secret)
      : rank_(rank), size_(size), epoch_(epoch), secret_(std::move(secret)) {}
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Opens the listening socket on `advertised_host`, the address peers use to reach it ("" picks
  // this host's first non-loopback IPv4 address, or 127.0.0.1 when there is none); never on
  // every interface.
  Status Listen(const std::string& advertised_host);
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

  // Connects the watch with `peer` (host/port from its endpoint info). The lower rank dials, the
  // higher rank accepts; either may call first. Returns by `deadline`.
  Status Connect(int peer, const std::string& host, uint16_t port, Deadline deadline);

  // Non-blocking: ranks whose connection closed since the last call (each reported once). Frames
  // received meanwhile are discarded.
  std::vector<int> PollGone();

  // Control frames. A heartbeat says "alive"; a goodbye says "closing on purpose, not dead"; an
  // abort carries the reason this rank aborted (at most kMaxReason bytes) and, when a lost peer
  // process caused it, that peer's rank.
  static constexpr size_t kMaxReason = 1024;
  struct Event {
    enum Kind { kGone, kBye, kAbort } kind;
    int rank;
    std::string reason;  // kAbort only
    int lost_rank = -1;  // kAbort only: the rank whose lost process caused it, or -1
  };
  // Writes a frame to every watched peer without blocking; a peer whose socket buffer is full
  // misses it (it is not reading, which its own silence will show).
  void SendHeartbeat();
  void SendBye();
  // `lost_rank`: the rank whose process died or stopped, when that caused the abort, else -1.
  void SendAbort(const std::string& reason, int lost_rank = -1);
  // Waits up to `timeout_ms` for input (or for `wake_fd`, when given, to become readable; it is
  // not read), then reads every peer. Returns what happened since the last call (heartbeats only
  // refresh heard_at). A peer gone or saying goodbye is unwatched.
  std::vector<Event> Poll(int timeout_ms, int wake_fd = -1);
  // When `peer` was last heard from (any byte), or the time it was connected.
  std::chrono::steady_clock::time_point heard_at(int peer) const;
  // Ranks currently watched.
  std::vector<int> watched() const;

 private:
  Status AcceptFrom(int peer, Deadline deadline);
  void SendFrame(const std::vector<uint8_t>& frame);
  // Parses the complete frames in `peer`'s buffer into `events`; false on a malformed frame.
  bool ParseFrames(int peer, std::vector<Event>& events);

  int rank_;
  int size_;
  uint64_t epoch_;
  std::string secret_;
  int listen_fd_ = -1;
  std::unique_ptr<HandshakeAcceptor> acceptor_;  // authenticates connections on listen_fd_
  std::string host_;
  uint16_t port_ = 0;
  std::map<int, int> watched_;   // peer rank -> connected socket
  std::map<int, int> accepted_;  // hellos received before Connect(peer) asked for them
  std::map<int, std::chrono::steady_clock::time_point> heard_at_;  // per watched peer
  std::map<int, std::vector<uint8_t>> inbox_;  // per watched peer: bytes of an incomplete frame
};

}  // namespace ferry
