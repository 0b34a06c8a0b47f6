// Peer processes: which process is behind each same-node peer rank, as the kernel reports it, not
// as a message claims.
//
// A direct read (core/runtime/direct_read.h) opens a peer's memfd through /proc/<pid>/fd/<fd> or
// reads its address space with process_vm_readv: the pid decides whose memory lands in this rank's
// weights. An offer carries a pid, but bytes on the wire prove nothing, so the reader takes the
// pid from here instead. Ranks of one node connect over Unix-domain sockets in the abstract
// namespace (one listener per rank, named from the communicator's group key and epoch) and run
// the rank hello (core/runtime/rank_hello.h) with this epoch's node secret, so each end knows the
// other is rank R of this communicator epoch. The kernel then names the process at the socket's
// other end (SO_PEERPIDFD, or SO_PEERCRED + pidfd_open on kernels before 6.5), and that process
// is bound to the authenticated rank. The pidfd outlives any recycling of the pid: CheckAlive
// fails once the verified process exited, so a read made through the pid and followed by a
// successful CheckAlive was made from that very process.
//
// Needs the ranks in one network namespace (abstract Unix sockets) and one pid namespace (/proc).
//
// Threading: Connect blocks (by its deadline); the const methods are thread-safe afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"

namespace ferry {

struct PeerProcessOptions {
  int rank = 0;
  int size = 1;
  uint64_t epoch = 0;
  std::string secret;       // this epoch's node secret, shared by the ranks only; not empty
  std::string socket_name;  // prefix of the listeners' abstract names; "<prefix>/<rank>"
  std::vector<int> peers;   // the same-node peer ranks to verify (this rank excluded)
};

class PeerProcesses {
 public:
  // Listens, then verifies every peer of `options.peers`: the lower rank of each pair dials, the
  // higher accepts. Connections that fail the rank hello are closed and logged, never bound.
  // Fails naming the first peer not verified by `deadline`.
  static Result<std::unique_ptr<PeerProcesses>> Connect(PeerProcessOptions options,
                                                        Deadline deadline);
  ~PeerProcesses();
  PeerProcesses(const PeerProcesses&) = delete;
  PeerProcesses& operator=(const PeerProcesses&) = delete;

  // The kernel-verified pid of `peer`; kFailedPrecondition naming the rank when it is not a
  // verified same-node peer.
  Result<int64_t> Pid(int peer) const;
  // A pidfd of `peer`'s verified process, owned by this object (valid while it lives);
  // kFailedPrecondition as Pid.
  Result<int> PidFd(int peer) const;
  // Ok while `peer`'s verified process has not exited; kUnavailable naming the rank and pid
  // after it did (its pid may since belong to another process).
  Status CheckAlive(int peer) const;

 private:
  struct Verified {
    int64_t pid = 0;
    int pidfd = -1;  // owned
  };
  explicit PeerProcesses(PeerProcessOptions options) : options_(std::move(options)) {}
  Status Dial(int peer, Deadline deadline);
  Status AcceptLower(Deadline deadline);
  // Binds the process at the other end of connected socket `fd` to `peer`.
  Status Bind(int peer, int fd);

  PeerProcessOptions options_;
  int listen_fd_ = -1;
  std::map<int, Verified> verified_;
};

}  // namespace ferry
