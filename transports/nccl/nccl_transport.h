// NcclTransport: ferry's Transport over NCCL point-to-point (ncclSend/ncclRecv), registered as
// "nccl". It moves CUDA memory only, with the libnccl that nccl.library names (loaded at Create,
// nccl_library.h).
//
// Communicator. One NCCL communicator spans every rank of the ferry communicator: the first
// Connect creates it (rank 0 makes the ncclUniqueId and publishes it through the
// token-authenticated store under "e<epoch>/nccl/unique_id"; the others fetch it), so every rank
// must use nccl for at least one link class (transport.same_rank=nccl gives every rank one). It is
// non-blocking (ncclConfig_t::blocking = 0): ncclCommInitRankConfig returns at once and Connect
// polls ncclCommGetAsyncError until the communicator is ready or the deadline passes.
//
// Grouping and matching. NCCL matches by issue order per peer pair and has no tags; ferry matches
// by (peer, tag). Posts are deferred: those between BeginGroup and EndGroup are issued at EndGroup,
// those outside a group at the next Poll, each batch as one ncclGroupStart/End ordered by
// (peer, tag) (deferred_group.h). Batches go out one at a time: NCCL takes no call on a
// non-blocking communicator still enqueuing a group, so the next one waits (inside Poll, never
// blocking) until ncclCommGetAsyncError leaves ncclInProgress. Completions come from a CUDA event
// recorded after each batch.
//
// Why this cannot deadlock, given the executor's round-synchronous use (core/runtime/
// rank_run_grouped.cc): the plan puts every Send and its Recv in the same round, and each rank
// issues all its nccl ops of round r as one batch, after its batch of round r-1 and before that of
// r+1. So on every pair of ranks, batch r holds the same messages in both directions, in the same
// (peer, tag) order; the ops of one batch progress together inside one group, so no batch waits
// on a later one of another rank. By induction over rounds every batch completes. Batches on the
// one stream serialise, which this order respects.
//
// Refused: host memory (RegisterMemory: kUnimplemented; the executor stages nothing into device
// memory for nccl), a receive whose buffer differs in size from the message (NCCL needs equal
// counts; ferry's plans always post equal sizes), CUDA memory of another device than the
// communicator's.
//
// Abort returns at once: it marks the transport aborted and runs ncclCommAbort on a detached
// thread. The destructor waits up to deadline.abort for that thread; a library abort that does not
// return is reported on stderr and its communicator, stream and events are leaked, never waited on.
//
// Threading: the Transport contract's (one driving thread; Abort from any thread). Every NCCL call
// on the communicator holds a per-communicator lock that the abort thread also takes, so the abort
// never frees the communicator under a call in progress.
#pragma once

#include <memory>

#include "core/base/status.h"
#include "core/runtime/transport.h"
#include "transports/nccl/nccl_options.h"

namespace ferry {

// Creates the transport for `context` (loads nccl.library; no GPU work until Connect).
Result<std::unique_ptr<Transport>> CreateNcclTransport(const TransportContext& context);

// The registry entry ("nccl", its description, NcclOptions::Table(), CreateNcclTransport).
TransportRegistration NcclTransportRegistration();

}  // namespace ferry
