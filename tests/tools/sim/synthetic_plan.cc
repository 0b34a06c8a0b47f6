// Synthetic reshard-shaped plans for simulator tests and benchmarks.
#include "tests/tools/sim/synthetic_plan.h"

#include <algorithm>

namespace ferry::sim {

TransferPlan SyntheticReshardPlan(const SyntheticShape& shape) {
  TransferPlan plan;
  plan.strategy = "synthetic";
  plan.num_ranks = shape.sources + shape.destinations;
  int64_t message = 0;
  for (int s = 0; s < shape.sources; ++s) {
    int previous_send = -1;
    for (int k = 0; k < shape.fan; ++k) {
      int d = shape.sources + (s * 7 + k * 13) % shape.destinations;
      for (int64_t off = 0; off < shape.bytes_per_pair; off += shape.chunk_bytes) {
        int64_t bytes = std::min(shape.chunk_bytes, shape.bytes_per_pair - off);
        Op send;
        send.kind = OpKind::kSend;
        send.rank = s;
        send.peer = d;
        send.message = message;
        send.bytes = bytes;
        previous_send = previous_send >= 0 ? plan.AddOp(send, {previous_send}) : plan.AddOp(send);
        Op recv;
        recv.kind = OpKind::kRecv;
        recv.rank = d;
        recv.peer = s;
        recv.message = message++;
        recv.bytes = bytes;
        int r = plan.AddOp(recv);
        Op unpack;
        unpack.kind = OpKind::kUnpack;
        unpack.rank = d;
        unpack.bytes = bytes;
        plan.AddOp(unpack, {r});
      }
    }
  }
  return plan;
}

}  // namespace ferry::sim
