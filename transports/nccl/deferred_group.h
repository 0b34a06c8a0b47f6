// DeferredGroup: the sends and receives a rank posts to NCCL between two group boundaries, held
// back and handed out in the one order that both ends of every link agree on.
//
// Why an order is needed: NCCL has no tags. It matches the sends rank A issues to B with the
// receives B issues from A purely by issue order, per (A, B) pair and direction (NCCL's
// src/enqueue.cc queues p2p tasks per peer in issue order; the user guide's "Point-to-point
// communication" page). ferry's Transport contract matches by (peer, tag), and the executor posts
// a round's ops in its own scheduling order, which differs between ranks. Sorting each group by
// (peer, tag) makes A's sends to B and B's receives from A — the same set of tags, since the plan
// puts a Send and its Recv in the same round — come out in the same order on both sides. Equal
// (peer, tag) keep their posting order, as the Transport contract asks.
//
// Pure bookkeeping, no NCCL calls; not thread-safe (the transport's driving thread owns it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/runtime/transport.h"

namespace ferry {

struct DeferredOp {
  bool send = false;
  int peer = 0;
  uint64_t tag = 0;
  void* data = nullptr;  // device address of the bytes
  int64_t bytes = 0;
  RequestId request = 0;
};

class DeferredGroup {
 public:
  void Add(const DeferredOp& op) { ops_.push_back(op); }
  bool empty() const { return ops_.empty(); }
  int64_t size() const { return static_cast<int64_t>(ops_.size()); }

  // Every op added since the last Take, ordered by (peer, tag, posting order); leaves the group
  // empty.
  std::vector<DeferredOp> Take();

 private:
  std::vector<DeferredOp> ops_;
};

}  // namespace ferry
