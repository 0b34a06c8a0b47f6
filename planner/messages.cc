// OrderMessages: deliveries in round order, coalesced into messages.
#include "planner/messages.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

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

// Reorders one sender's `messages`, which come grouped by destination distance in rotated order,
// so that consecutive messages go to different nodes: the first message to every distance, then
// the second to every distance, and so on (each distance keeps its own order). The executor posts
// a rank's sends in this order with at most executor.max_in_flight in the air, so whatever the
// window, every destination node's NICs get work from the start instead of a few nodes taking all
// of every rank's first window (docs/simulator.md, "In-flight window").
template <typename DistanceOf>
void InterleaveNodes(std::span<Message> messages, const DistanceOf& distance_of) {
  std::vector<std::pair<int64_t, int>> keys(messages.size());
  int64_t distance = -1, nth = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const int64_t d = distance_of(messages[i]);
    nth = d == distance ? nth + 1 : 0;
    distance = d;
    keys[i] = {nth << 32 | d, static_cast<int>(i)};
  }
  std::sort(keys.begin(), keys.end());
  std::vector<Message> reordered;
  reordered.reserve(messages.size());
  for (const auto& key : keys) reordered.push_back(messages[key.second]);
  std::copy(reordered.begin(), reordered.end(), messages.begin());
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
    const size_t first_message = out.messages.size();
    const size_t end = static_cast<size_t>(sender_begin[sender + 1]);
    for (size_t i = static_cast<size_t>(sender_begin[sender]); i < end;) {
      Message m;
      m.sender = sender;
      m.tree = sorted[i].tree;
      m.first = static_cast<int>(i);
      const int size = trees.Size(m.tree);
      // A message to itself (planner.same_rank=transport) keeps network_chunk_bytes, as its
      // deliveries were cut (routing.cc RouteToSelf).
      const int first = trees.Rank(m.tree, 0);
      const int64_t cap = ChunkCap(options, size, node_of[first], node_of[trees.Rank(m.tree, size - 1)],
                                   first == sender ? -1 : node_of[sender]);
      size_t j = i;
      while (j < end && sorted[j].tree == m.tree && (j == i || m.bytes + sorted[j].bytes <= cap)) {
        m.bytes += sorted[j].bytes;
        ++j;
      }
      m.last = static_cast<int>(j);
      out.messages.push_back(m);
      i = j;
    }
    // A message's distance is its first delivery's, already in that delivery's sort key.
    InterleaveNodes(std::span<Message>(out.messages).subspan(first_message),
                    [&](const Message& m) { return keys[m.first].first >> 32; });
  }
  return out;
}

}  // namespace ferry
