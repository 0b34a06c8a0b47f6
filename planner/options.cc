// The planner's option table.
#include "planner/options.h"

namespace ferry {

// PlanReshard refuses smaller chunks; the table refuses them first, naming the option.
constexpr int64_t kSmallestChunk = 64;

const OptionTable<PlannerOptions>& PlannerOptions::Table() {
  static const OptionTable<PlannerOptions>* table = [] {
    auto* t = new OptionTable<PlannerOptions>();
    t->Bytes("planner.network_chunk_bytes", &PlannerOptions::network_chunk_bytes,
             "largest message between nodes; bigger transfers are split so relays and fan-out pipeline",
             kSmallestChunk)
        .Bytes("planner.same_node_chunk_bytes", &PlannerOptions::same_node_chunk_bytes,
               "largest message from a source rank to a destination rank of its node (direct "
               "reads need no staging for it: raise it when they are on)",
               kSmallestChunk)
        .Bytes("planner.fanout_chunk_bytes", &PlannerOptions::fanout_chunk_bytes,
               "largest message of a fan-out chain inside a destination node", kSmallestChunk)
        .Bytes("planner.relay_chunk_bytes", &PlannerOptions::relay_chunk_bytes,
               "largest message of a chain relayed between destination nodes", kSmallestChunk)
        .Bool("planner.hierarchical", &PlannerOptions::hierarchical,
              "bytes several ranks of a node need cross the network once, then fan out inside it")
        .Choice("planner.relay", &PlannerOptions::relay,
                {{"auto", RelayMode::kAuto}, {"off", RelayMode::kOff}, {"on", RelayMode::kOn}},
                "relay chunks between destination nodes' leaders (auto: when the sources' egress "
                "bounds the refit)")
        .Choice("planner.same_rank", &PlannerOptions::same_rank,
                {{"copy", SameRankMode::kCopy}, {"transport", SameRankMode::kTransport}},
                "bytes a rank holds for itself: one local copy, or a message to itself over "
                "transport.same_rank (exercises that transport on one rank)")
        .Bytes("planner.bucket_bytes", &PlannerOptions::bucket_bytes,
               "gather-and-broadcast baseline: bucket size")
        .Bytes("planner.broadcast_chunk_bytes", &PlannerOptions::broadcast_chunk_bytes,
               "gather-and-broadcast baseline: largest message of the pipelined broadcast", kSmallestChunk)
        .Int("planner.broadcast_buffers", &PlannerOptions::broadcast_buffers,
             "gather-and-broadcast baseline: bucket buffers a rank cycles through (NeMo RL's "
             "NRL_REFIT_NUM_BUFFERS)",
             1, 1 << 20);
    return t;
  }();
  return *table;
}

}  // namespace ferry
