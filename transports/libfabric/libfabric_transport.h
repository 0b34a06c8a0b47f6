// The "libfabric" transport: ferry's Transport over a libfabric FI_EP_RDM endpoint with tagged
// messages. One fabric/domain/endpoint/CQ/address vector per transport instance; peers are entered
// into the address vector from their endpoint names (the opaque endpoint info). Receives are
// directed (FI_DIRECTED_RECV), so a message matches by (sender, tag) exactly as the Transport
// contract asks, with all 64 tag bits left to the caller.
//
// The provider comes from the `libfabric.provider` option ("tcp" and "shm" and "sockets" on one
// machine; "efa", "verbs" on clusters). Memory is registered as the provider's mr_mode requires:
// with FI_MR_LOCAL every buffer gets a registration whose descriptor goes with each post, and
// FI_MR_ENDPOINT registrations are bound to the endpoint.
//
// RDM endpoints do not tell a receiver that its sender died, so a PeerWatch (peer_watch.h) keeps
// an idle TCP connection per peer and fails that peer's requests when it closes. Two-sided only.
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/base/config.h"
#include "core/runtime/transport.h"

namespace ferry {

// This transport's options ("libfabric.provider", "libfabric.domain", "libfabric.watch_host",
// "libfabric.peer_exit_grace").
std::vector<OptionSpec> LibfabricTransportOptions();

// Creates an instance for `context`: opens the fabric, domain and endpoint. Does not contact peers.
Result<std::unique_ptr<Transport>> CreateLibfabricTransport(const TransportContext& context);

}  // namespace ferry
