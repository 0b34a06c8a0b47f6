// The `tcp` transport: plain non-blocking sockets and epoll, no other dependency. Two-sided only,
// host memory only. One connection per pair of ranks (the lower rank connects, the higher accepts);
// messages to oneself are matched in memory.
//
// Wire format: frames of a 32-byte header (u64 tag, u64 bytes, u64 message id, u32 kind, u32 0)
// and, for eager and data frames, a payload. A message of at most tcp.eager_bytes is one eager
// frame; a larger one is a ready-to-send, answered by the receiver's clear-to-send once a receive
// is posted for it, then a data frame read straight into that receive, so a receiver never
// buffers more than tcp.eager_bytes of a message it is not ready for. A connection starts with a
// hello ("FRYT", epoch, rank); the acceptor drops connections of another epoch, so messages of an
// older communicator epoch never arrive. A frame that breaks the protocol (an unknown kind, sizes
// over the limits, a clear-to-send or data for a message not announced) fails its peer.
//
// Options: tcp.address (address advertised to peers; empty = this host's first non-loopback IPv4);
// tcp.eager_bytes (64KiB; at most 64MiB).
#pragma once

#include <memory>

#include "core/runtime/transport.h"

namespace ferry {

Result<std::unique_ptr<Transport>> CreateTcpTransport(const TransportContext& context);
TransportRegistration TcpTransportRegistration();

}  // namespace ferry
