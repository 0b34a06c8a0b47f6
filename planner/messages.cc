// OrderMessages: deliveries in round order, coalesced into messages.
#include "planner/messages.h"

#include <algorithm>
#include <numeric>

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
  return out;
}

}  // namespace

MessageOrder OrderMessages(const Intersection& inter, const PlanFacts& facts,
                           const PlannerOptions& options, const TreeTable& trees,
                           const Routes& routes, int num_nodes) {
  const std::vector<Delivery>& deliveries = routes.deliveries;
  const std::vector<int>& node_of = facts.node_of_rank;
  auto sender_of = [&](const Delivery& d) { return facts.source_rank[d.sender_frag]; };
  auto distance = [&](const Delivery& d) {
    return (node_of[trees.Rank(d.tree, 0)] - node_of[sender_of(d)] + num_nodes) % num_nodes;
  };
  std::vector<int> order(deliveries.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Delivery& x = deliveries[a];
    const Delivery& y = deliveries[b];
    if (sender_of(x) != sender_of(y)) return sender_of(x) < sender_of(y);
    if (distance(x) != distance(y)) return distance(x) < distance(y);
    return x.tree < y.tree;
  });
  MessageOrder out;
  out.deliveries.reserve(order.size());
  for (int i : order) out.deliveries.push_back(Sorted(inter, facts, routes, deliveries[i]));
  const std::vector<SortedDelivery>& sorted = out.deliveries;
  for (size_t i = 0; i < order.size();) {
    Message m;
    m.sender = sender_of(deliveries[order[i]]);
    m.tree = sorted[i].tree;
    m.first = static_cast<int>(i);
    const int size = trees.Size(m.tree);
    const int64_t cap = ChunkCap(options, size, node_of[trees.Rank(m.tree, 0)],
                                 node_of[trees.Rank(m.tree, size - 1)]);
    size_t j = i;
    while (j < order.size() && sorted[j].tree == m.tree &&
           sender_of(deliveries[order[j]]) == m.sender &&
           (j == i || m.bytes + sorted[j].bytes <= cap)) {
      m.bytes += sorted[j].bytes;
      ++j;
    }
    m.last = static_cast<int>(j);
    out.messages.push_back(m);
    i = j;
  }
  return out;
}

}  // namespace ferry
