// The `tcp` transport: plain non-blocking sockets and epoll, no other dependency. Two-sided only,
// host memory only. One connection per pair of ranks (the lower rank connects, the higher accepts);
// messages to oneself are matched in memory.
//
// Wire format per message: u64 tag, u64 length, payload. A connection starts with a hello
// ("FRYT", epoch, rank); the acceptor drops connections of another epoch, so messages of an older
// communicator epoch never arrive.
//
// Options: tcp.address (address advertised to peers; empty = this host's first non-loopback IPv4).
#pragma once

#include <memory>

#include "core/runtime/transport.h"

namespace ferry {

Result<std::unique_ptr<Transport>> CreateTcpTransport(const TransportContext& context);
TransportRegistration TcpTransportRegistration();

}  // namespace ferry
