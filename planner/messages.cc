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

// Reorders the messages of one sender to one destination node, which come grouped by tree, so
// that consecutive messages go to different trees (hence to different receiving ranks and their
// NICs): the first message of every tree, then the second of every tree, and so on, the trees
// taken from the one at `sender` modulo their count (senders start on different ranks). Without
// it a sender's first window fills one receiving rank of each node (when a sender sends to every
// rank of a node, as to vLLM's TP-sharded experts) and every sender the same one: the node's other
// rails idle (docs/planner.md, "Coalescing and rounds").
void InterleaveTrees(std::span<Message> messages, int sender) {
  std::vector<std::pair<int, int>> groups;  // (first message, count) of each tree, in order
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 || messages[i].tree != messages[i - 1].tree) groups.push_back({static_cast<int>(i), 0});
    ++groups.back().second;
  }
  if (groups.size() < 2) return;
  const int num_groups = static_cast<int>(groups.size());
  const int start = sender % num_groups;
  std::vector<Message> reordered;
  reordered.reserve(messages.size());
  for (int nth = 0; reordered.size() < messages.size(); ++nth) {
    for (int g = 0; g < num_groups; ++g) {
      const auto& [first, count] = groups[(start + g) % num_groups];
      if (nth < count) reordered.push_back(messages[first + nth]);
    }
  }
  std::copy(reordered.begin(), reordered.end(), messages.begin());
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
    auto distance_of = [&](const Message& m) { return keys[m.first].first >> 32; };
    const std::span<Message> mine = std::span<Message>(out.messages).subspan(first_message);
    for (size_t i = 0; i < mine.size();) {
      size_t j = i;
      while (j < mine.size() && distance_of(mine[j]) == distance_of(mine[i])) ++j;
      InterleaveTrees(mine.subspan(i, j - i), sender);
      i = j;
    }
    InterleaveNodes(mine, distance_of);
  }
  return out;
}

}  // namespace ferry
