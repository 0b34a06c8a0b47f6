// The "ucx" transport: ferry's Transport over UCX's UCP layer. One UCP context and one worker per
// transport instance; one endpoint per peer, created from the peer's worker address (the opaque
// endpoint info), with error handling mode "peer" so that a dead peer fails its requests instead of
// hanging them.
//
// Two-sided messages travel as UCP active messages whose header carries (epoch, sender rank, tag);
// this file's matching engine pairs them with posted receives by (sender, tag), in arrival order.
// Large messages use UCX's rendezvous (zero-copy where the transport allows). One-sided puts use
// ucp_put_nbx into memory the peer registered with ucp_mem_map, whose packed rkey travels as the
// opaque RemoteKey bytes; the put is flushed before its notification is sent, so the notification
// means "the bytes have landed".
//
// Which UCX transports carry the bytes is UCX's choice among those UCX_TLS (or the `ucx.tls`
// option) allows: tcp and shared memory on one machine, rc/dc/ud and cuda on clusters. UCX 1.13's
// shared-memory transports cannot report peer failure, so with ucx.error_mode=peer they carry no
// endpoint there; UCX_TLS=tcp (or sm,tcp) is what works with peer failure detection on such a
// version.
//
// Memory: host always; CUDA when the loaded UCX reports CUDA among its memory types and ucx.cuda
// is not off (ucx_memory.h). CUDA blocks are registered with ucp_mem_map as CUDA memory, and every
// send, receive and put of CUDA memory names its memory type and handle, so UCX moves it with its
// CUDA transports (cuda_ipc between processes of one node, cuda_copy through host memory, or the
// network's GPU-direct path); data messages to a rank that moves CUDA memory go rendezvous, so its
// UCX, not a memcpy, writes them into the receive buffer.
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/base/config.h"
#include "core/runtime/transport.h"

namespace ferry {

// This transport's options ("ucx.tls", "ucx.error_mode", "ucx.strict_tls", "ucx.cuda",
// "ucx.close_timeout").
std::vector<OptionSpec> UcxTransportOptions();

// Creates an instance for `context` (rank, size, epoch, options). Does not contact peers.
Result<std::unique_ptr<Transport>> CreateUcxTransport(const TransportContext& context);

}  // namespace ferry
