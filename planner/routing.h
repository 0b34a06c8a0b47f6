// Routing of a reshard plan: what reaches each destination fragment, and how. Per piece of the
// intersection, a destination rank that holds it copies it locally; a rank on a node where a
// holder is gets a direct intra-node delivery; the others are served over the network, once per
// destination node (hierarchical: to a leader chosen by load, then along a chain through the
// node's other ranks that need it) or, when relaying, once for all nodes along a chain of node
// leaders. Deliveries are cut into chunks so that chains pipeline. Internal to //planner.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout/box.h"
#include "planner/intersect.h"
#include "planner/plan_facts.h"
#include "planner/planner.h"
#include "planner/tree_table.h"

namespace ferry {

// A tree member's entry in Routes::member_fragments when it has several fragments of the piece's
// group (search the group for them).
constexpr int kLookUp = -1;

// One chunk of one piece bound for one delivery tree. Its candidates (the source fragments that
// may send it) are a range of candidate numbers: the piece's holders (indexes into
// Intersection::holders) for the network, or, past the holders, entries of Routes::intra_pool (the
// piece's holders on the receiving rank's node) for a direct intra-node delivery.
struct Delivery {
  int piece = 0;
  int chunk = -1;  // the chunk: the piece's box when < 0, else an index into Routes::chunk_boxes
  int64_t bytes = 0;
  int tree = 0;
  int cand_begin = 0, cand_end = 0;
  int sender_frag = -1;  // chosen by source selection
  // Member i of the tree has its destination fragments of the piece's group at
  // member_fragments[members + i]: the fragment when it has exactly one (the usual case), else
  // kLookUp. A tree of one rank with one fragment f has members = ~f instead (no list entry).
  int members = 0;
};

// Member i's fragment entry (see Delivery::members) of a delivery or a SortedDelivery.
template <typename AnyDelivery>
inline int MemberFragment(const AnyDelivery& d, const std::vector<int>& member_fragments, int i) {
  return d.members < 0 ? ~d.members : member_fragments[static_cast<size_t>(d.members + i)];
}

// A destination fragment `dst` of piece `piece` on rank `rank`, which also holds the piece
// (source fragment `src`).
struct LocalCopy {
  int rank, piece, src, dst;
};

// What routing makes of the intersection.
struct Routes {
  std::vector<LocalCopy> local_copies;
  std::vector<Delivery> deliveries;
  std::vector<int> intra_pool;        // same-node holders, candidates numbered after the holders
  std::vector<Box> chunk_boxes;       // the boxes of deliveries that carry part of a piece
  std::vector<int> member_fragments;  // tree members' fragments (Delivery::members)
};

// The largest message for a delivery tree of `size` ranks whose first and last ranks are on nodes
// `first_node` and `last_node`, sent from node `sender_node` (-1: another node): one rank of the
// sender's node or of another, a chain inside one node, or a chain relayed between nodes' leaders
// (its ranks node by node, so its first and last ranks are on different nodes).
int64_t ChunkCap(const PlannerOptions& options, int size, int first_node, int last_node,
                 int sender_node);

// Cuts `box` into boxes of at most `cap` bytes (at least one element each), in row-major order.
// Cut along the second-to-last dim (a matrix's rows), chunks hold a multiple of `row_align` rows
// where `cap` holds at least 2 x row_align of them.
void ChunkBox(const Box& box, int64_t esize, int64_t cap, std::vector<Box>& out, int64_t row_align = 1);

// Routes every piece of `inter`: local copies, intra-node deliveries and network deliveries
// (chunked), their trees interned in `trees`. `relay`: network deliveries needed on several
// nodes travel one chain of node leaders instead of one tree per node.
Routes RouteDeliveries(const Intersection& inter, const PlanFacts& facts,
                       const PlannerOptions& options, bool relay, int num_ranks, int num_nodes,
                       TreeTable& trees);

}  // namespace ferry
