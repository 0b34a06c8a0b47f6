// Small POSIX socket helpers shared by the TCP store and the tcp transport: listen, connect with a
// deadline, and read/write whole buffers with a deadline (and, for the store, a wake-up that
// cuts them short). Every function returns by its deadline.
// File descriptors returned are owned by the caller (close them). Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"

namespace ferry {

inline constexpr int kListenBacklog = 128;

struct Listener {
  int fd = -1;
  int port = 0;  // the bound port (useful when asked for port 0)
};

// Listens on `host` and `port` (0 picks a free one). Every interface only when asked for by name
// ("0.0.0.0"); an empty host is an error, so that no listener opens to every network by default.
// The backlog is small (kListenBacklog): connections beyond it wait in the peer's kernel.
Result<Listener> ListenTcp(const std::string& host, int port);
// Connects to host:port, retrying refused connections until `deadline` (the listener may not be
// up yet) unless `retry_refused` is false (a listener known to have been up: refused means it is
// gone, kUnavailable at once). The returned socket is blocking with TCP_NODELAY set.
Result<int> ConnectTcp(const std::string& host, int port, Deadline deadline, bool retry_refused = true);
// Accepts one connection, waiting until `deadline`; returns -1 (not an error) when it passes.
Result<int> AcceptTcp(int listen_fd, Deadline deadline);
// Lets another thread end a WriteAll/ReadAll that waits on its socket: while waiting it also polls
// `fd` (an eventfd the other thread writes), drains it when readable, and after every wake-up ends
// the transfer with kAborted ("cut short") when `cut()` says so. Not owned.
struct SocketWake {
  int fd = -1;
  std::function<bool()> cut;
};

// Writes/reads exactly `bytes`, waiting with poll() so that the deadline is honoured, and ending
// early through `wake` when one is given.
Status WriteAll(int fd, const void* data, int64_t bytes, Deadline deadline, const SocketWake* wake = nullptr);
Status ReadAll(int fd, void* data, int64_t bytes, Deadline deadline, const SocketWake* wake = nullptr);
Status SetNonBlocking(int fd);
// The address other hosts can reach this one at: the first non-loopback IPv4 address, or
// 127.0.0.1 when there is none.
std::string LocalAddress();
std::string HostName();

}  // namespace ferry
