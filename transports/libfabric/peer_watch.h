// PeerWatch: notices when a peer process dies, for transports whose fabric does not report it.
//
// libfabric's connectionless FI_EP_RDM endpoints give no error to a receiver whose sender died
// (and the shm and tcp providers let a large send to a dead peer wait forever). PeerWatch keeps one
// idle TCP connection per peer beside the fabric: the kernel closes it when the peer's process
// exits, which PeerWatch reports as the peer being gone. Connections open with the rank hello
// (core/runtime/rank_hello.h): a connection that does not prove this communicator epoch's secret,
// or claims an unexpected rank, is closed and logged and never watched.
//
// Threading: one thread at a time (the transport's progress thread). Blocking: only Connect
// waits, until its deadline.
#pragma once

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

  // Non-blocking: ranks whose connection closed since the last call (each reported once).
  std::vector<int> PollGone();

 private:
  Status AcceptFrom(int peer, Deadline deadline);

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
};

}  // namespace ferry
