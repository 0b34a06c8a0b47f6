// Messages of a reshard plan and their order: deliveries of one sender to one tree coalesced into
// messages of at most one chunk, each sender's messages in rounds that cycle through the
// destination nodes in a rotated order (the distance from the sender's node): one message to each
// node in turn, so that senders do not all target one node at once and any prefix of a rank's
// sends (what its in-flight window holds) spreads over every node it sends to. Internal to
// //planner.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/layout/box.h"
#include "planner/intersect.h"
#include "planner/plan_facts.h"
#include "planner/planner.h"
#include "planner/routing.h"
#include "planner/tree_table.h"

namespace ferry {

// A delivery as emission reads it, in message order: its box (the chunk's when cut; for a member
// cut its group's box, cut at `member`), group, dtype, size, tree, sender and tree members'
// fragments (as Delivery::members).
struct SortedDelivery {
  const Box* box = nullptr;
  const FragmentGroup* group = nullptr;
  int64_t bytes = 0;
  int tree = 0;
  int sender_frag = -1;
  int members = 0;
  DType dtype = DType::kUInt8;         // the destination tensor's
  DType source_dtype = DType::kUInt8;  // the source tensor's (another when the planner converts)
  int member = -1;  // Intersection::MemberOf the piece, or -1
};

// The box of delivery `d`: the one it points to, or for a member cut that box cut at its member,
// built into `storage`.
inline const Box& DeliveryBox(const SortedDelivery& d, Box& storage) {
  if (d.member < 0) return *d.box;
  storage = *d.box;
  Intersection::CutAtMember(storage, d.member);
  return storage;
}

// Deliveries [first, last) of `sender` to `tree`, sent as one message of `bytes`.
struct Message {
  int sender = 0;
  int tree = 0;
  int first = 0, last = 0;
  int64_t bytes = 0;
};

struct MessageOrder {
  std::vector<SortedDelivery> deliveries;  // by (sender, distance, tree, delivery index)
  std::vector<Message> messages;           // by sender; each sender's cycling through nodes
};

// Orders `routes`' deliveries (their senders selected) by sender, then by the distance
// (root node - sender node) mod nodes of their tree, then tree, then index, and cuts each run of
// one sender and tree into messages of at most the tree's chunk size (ChunkCap); then each
// sender's messages take one distance after another in turn (the first to every distance, the
// second to every distance, ...).
MessageOrder OrderMessages(const Intersection& inter, const PlanFacts& facts,
                           const PlannerOptions& options, const TreeTable& trees,
                           const Routes& routes, int num_nodes);

}  // namespace ferry
