// OrderMessages: deliveries in round order, coalesced into messages.
#include "planner/messages.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace ferry {
namespace {

// What emission reads of delivery `d`, looked up once here.
SortedDelivery Sorted(const Intersection& inter, const PlanFacts& facts, const Routes& routes,
                      const Delivery& d) {
  const Piece& piece = inter.pieces[d.piece];
  const FragmentGroup& group = inter.groups[piece.group];
  SortedDelivery out;
  if (d.chunk >= 0) {
    out.box = &routes.chunk_boxes[d.chunk];
  } else if (const Box* stored = inter.StoredBoxOf(piece)) {
    out.box = stored;
  } else {  // a member cut: its group's box, cut at the member
    out.box = group.box;
    out.member = static_cast<int>(Intersection::MemberOf(piece));
  }
  out.group = &group;
  out.bytes = d.bytes;
  out.tree = d.tree;
  out.sender_frag = d.sender_frag;
  out.members = d.members;
  out.dtype = facts.piece_dtype[d.piece];
  out.source_dtype = facts.piece_source_dtype[d.piece];
  return out;
}

}  // namespace

MessageOrder OrderMessages(const Intersection& inter, const PlanFacts& facts,
                           const PlannerOptions& options, const TreeTable& trees,
                           const Routes& routes, int num_nodes) {
  const std::vector<Delivery>& deliveries = routes.deliveries;
  const std::vector<int>& node_of = facts.node_of_rank;
  // Deliveries by sender (a stable counting sort), then each sender's few by (distance, tree,
  // index): `keys` holds (distance << 32 | tree, index) per delivery in that order.
  const int num_ranks = static_cast<int>(node_of.size());
  std::vector<int> sender_begin(num_ranks + 1, 0);
  for (const Delivery& d : deliveries) ++sender_begin[facts.source_rank[d.sender_frag] + 1];
  for (int r = 0; r < num_ranks; ++r) sender_begin[r + 1] += sender_begin[r];
  std::vector<std::pair<int64_t, int>> keys(deliveries.size());
  {
    std::vector<int> fill(sender_begin.begin(), sender_begin.end() - 1);
    for (size_t i = 0; i < deliveries.size(); ++i) {
      const Delivery& d = deliveries[i];
      const int sender = facts.source_rank[d.sender_frag];
      const int64_t distance =
          (node_of[trees.Rank(d.tree, 0)] - node_of[sender] + num_nodes) % num_nodes;
      keys[fill[sender]++] = {distance << 32 | d.tree, static_cast<int>(i)};
    }
  }
  for (int r = 0; r < num_ranks; ++r) {
    std::sort(keys.begin() + sender_begin[r], keys.begin() + sender_begin[r + 1]);
  }
  MessageOrder out;
  out.deliveries.reserve(keys.size());
  for (const auto& [key, index] : keys) {
    out.deliveries.push_back(Sorted(inter, facts, routes, deliveries[index]));
  }
  const std::vector<SortedDelivery>& sorted = out.deliveries;
  for (int sender = 0; sender < num_ranks; ++sender) {
    const size_t end = static_cast<size_t>(sender_begin[sender + 1]);
    for (size_t i = static_cast<size_t>(sender_begin[sender]); i < end;) {
      Message m;
      m.sender = sender;
      m.tree = sorted[i].tree;
      m.first = static_cast<int>(i);
      const int size = trees.Size(m.tree);
      const int64_t cap = ChunkCap(options, size, node_of[trees.Rank(m.tree, 0)],
                                   node_of[trees.Rank(m.tree, size - 1)]);
      size_t j = i;
      while (j < end && sorted[j].tree == m.tree && (j == i || m.bytes + sorted[j].bytes <= cap)) {
        m.bytes += sorted[j].bytes;
        ++j;
      }
      m.last = static_cast<int>(j);
      out.messages.push_back(m);
      i = j;
    }
  }
  return out;
}

}  // namespace ferry
