// EmitOps: ops, slots, deps and copy pairs, message by message.
#include "planner/emit.h"

#include <algorithm>
#include <array>
#include <utility>

#include "planner/conversion.h"

namespace ferry {
namespace {

// One side of a copy pair whose shape is a box: a fragment's buffer or a dense staging block.
struct CopySide {
  CopyEnd end;             // strides null: dense row-major (stored without strides)
  bool contiguous = true;  // Region::IsContiguous of the side
};

// `box` (inside fragment f's box, of type `dtype`) in the fragment's buffer. Strides equal to the
// box's row-major strides are left out (dense).
CopySide FragmentSide(const FragmentAt& f, DType dtype, Space space, const Box& box) {
  CopySide s;
  s.end.space = space;
  s.end.buffer = f.table->Buffer(f.index);
  s.end.dtype = dtype;
  const int64_t esize = DTypeSize(dtype);
  int64_t offset = f.table->ByteOffset(f.index);
  const int n = box.ndim;
  const int64_t* lo = f.table->ValuesOf(f.index, n);
  const int64_t* strides = lo + 2 * n;
  bool dense = true;
  int64_t dense_stride = 1, contiguous_stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t extent = box.hi[d] - box.lo[d];
    const int64_t stride = strides[d];
    offset += (box.lo[d] - lo[d]) * stride * esize;
    dense = dense && stride == dense_stride;
    dense_stride *= std::max<int64_t>(1, extent);
    s.contiguous = s.contiguous && (extent == 1 || stride == contiguous_stride);
    contiguous_stride *= extent;
  }
  s.end.offset = offset;
  s.end.strides = dense ? nullptr : strides;
  return s;
}

// A dense block at `offset` of staging slot `slot`.
CopySide SlotSide(int slot, int64_t offset, DType dtype) {
  CopySide s;
  s.end.buffer = slot;
  s.end.offset = offset;
  s.end.dtype = dtype;
  return s;
}

// Appends the copy pair from `from` to `to` of `box`'s shape. Leading dims of extent 1 beyond the
// last two are left out (a tensor stack's slice of one member copies as the member's block): the
// same elements at the same offsets, with the 2-dim geometry most pairs share.
void AppendBoxCopy(TransferPlan& plan, const CopySide& from, const CopySide& to, const Box& box) {
  std::array<int64_t, kMaxDims> shape;
  int first = 0;
  while (box.ndim - first > 2 && box.Extent(first) == 1) ++first;
  for (int d = first; d < box.ndim; ++d) shape[d - first] = box.Extent(d);
  CopyEnd from_end = from.end, to_end = to.end;
  if (from_end.strides != nullptr) from_end.strides += first;
  if (to_end.strides != nullptr) to_end.strides += first;
  plan.AppendCopy(from_end, to_end, box.ndim - first, shape.data());
}

class Emitter {
 public:
  Emitter(const EmitInputs& in, TransferPlan& plan) : in_(in), plan_(plan) {}

  void Run() {
    Reserve();
    EmitLocalCopies();
    int round = 0, last_sender = -1;
    for (const Message& m : in_.order.messages) {
      round = m.sender == last_sender ? round + 1 : 0;
      last_sender = m.sender;
      EmitMessage(m, round);
    }
  }

 private:
  // The tree a message goes down: one rank (no children), or an interned shape.
  struct Tree {
    int size;
    TreeTable::Shape shape;
    int Rank(int i, int root) const { return size == 1 ? root : shape.ranks[i]; }
  };

  // Reserves the plan's lists for their upper bounds (each regrowth would copy them): per
  // message a Pack and a Send, per tree member a Recv, an Unpack and a Forward to each child; a
  // copy pair per delivery on the sender and per destination fragment on each member; a dep per
  // Send, Unpack and Forward.
  void Reserve() {
    size_t ops = static_cast<size_t>(in_.num_ranks), slots = 0, deps = 0;
    size_t copies = in_.routes.local_copies.size();
    for (const Message& m : in_.order.messages) {
      const size_t size = static_cast<size_t>(in_.trees.Size(m.tree));
      ops += 2 + 3 * size;
      slots += 1 + size;
      deps += 1 + 2 * size;
      copies += static_cast<size_t>(m.last - m.first) * (1 + size);
    }
    plan_.ops.reserve(ops);
    plan_.slots.reserve(slots);
    plan_.dep_list.reserve(deps);
    plan_.copies.reserve(copies);
  }

  // One Copy op per rank with local copies, its copies in piece order; a Convert instead when a
  // copy changes the dtype.
  void EmitLocalCopies() {
    const std::vector<LocalCopy>& copies = in_.routes.local_copies;
    std::vector<int> by_rank(copies.size());
    for (size_t i = 0; i < copies.size(); ++i) by_rank[i] = static_cast<int>(i);
    std::stable_sort(by_rank.begin(), by_rank.end(),
                     [&](int a, int b) { return copies[a].rank < copies[b].rank; });
    Box storage;
    for (size_t k = 0; k < by_rank.size();) {
      Op op;
      op.kind = OpKind::kCopy;
      op.rank = copies[by_rank[k]].rank;
      op.link = LinkClass::kSameRank;
      op.copies_begin = static_cast<int>(plan_.copies.size());
      for (; k < by_rank.size() && copies[by_rank[k]].rank == op.rank; ++k) {
        const LocalCopy& c = copies[by_rank[k]];
        const Box& box = PieceBox(in_.inter, in_.inter.pieces[c.piece], storage);
        const DType dtype = in_.facts.piece_dtype[c.piece];
        const DType source_dtype = in_.facts.piece_source_dtype[c.piece];
        if (source_dtype != dtype) op.kind = OpKind::kConvert;
        AppendBoxCopy(plan_, FragmentSide(in_.src_frags[c.src], source_dtype, Space::kSource, box),
                      FragmentSide(in_.dst_frags[c.dst], dtype, Space::kDestination, box), box);
        op.bytes += in_.facts.piece_bytes[c.piece];
      }
      op.copies_end = static_cast<int>(plan_.copies.size());
      plan_.AddOp(std::move(op));
    }
  }

  void EmitMessage(const Message& m, int round) {
    const int size = in_.trees.Size(m.tree);
    const Tree tree{size, size == 1 ? TreeTable::Shape{} : in_.trees.ShapeOf(m.tree)};
    const int root = tree.Rank(0, m.tree);
    int pack_id = -1;
    const DataPlace sent = EmitPack(m, round, &pack_id);
    const int send_id = NewOp(OpKind::kSend, m.sender, round);
    Op& send = plan_.ops[send_id];
    send.peer = root;
    send.bytes = m.bytes;
    send.link = Link(m.sender, root);
    send.message = next_message_++;
    send.data = sent;
    if (pack_id >= 0) DependOn(send_id, pack_id);
    if (static_cast<int>(message_of_.size()) < size) {
      message_of_.resize(size);
      recv_round_.resize(size);
    }
    message_of_[0] = plan_.ops[send_id].message;
    recv_round_[0] = round;
    for (int i = 0; i < size; ++i) EmitMember(m, tree, root, i);
  }

  // The sender's side of message `m`: where its bytes start, after a Pack into a staging slot
  // (its id in `pack_id`) unless the message is one contiguous region sent as it lies. The Pack
  // is a Convert when it narrows a delivery to its WireDType.
  DataPlace EmitPack(const Message& m, int round, int* pack_id) {
    const std::vector<SortedDelivery>& deliveries = in_.order.deliveries;
    const SortedDelivery& d0 = deliveries[m.first];
    Box storage;
    const Box& box0 = DeliveryBox(d0, storage);
    const CopySide src0 = FragmentSide(in_.src_frags[d0.sender_frag], d0.source_dtype,
                                       Space::kSource, box0);
    if (m.last - m.first == 1 && src0.contiguous &&
        WireDType(d0.source_dtype, d0.dtype) == d0.source_dtype) {
      return {Space::kSource, src0.end.buffer, src0.end.offset};
    }
    const int slot = plan_.AddSlot(m.sender, m.bytes);
    *pack_id = NewOp(OpKind::kPack, m.sender, round);
    const int copies_begin = static_cast<int>(plan_.copies.size());
    int64_t offset = 0;
    bool converts = false;
    for (int k = m.first; k < m.last; ++k) {
      const SortedDelivery& d = deliveries[k];
      const Box& box = DeliveryBox(d, storage);
      const DType wire = WireDType(d.source_dtype, d.dtype);
      converts = converts || wire != d.source_dtype;
      AppendBoxCopy(plan_,
                    FragmentSide(in_.src_frags[d.sender_frag], d.source_dtype, Space::kSource, box),
                    SlotSide(slot, offset, wire), box);
      offset += d.bytes;
    }
    Op& pack = plan_.ops[*pack_id];
    if (converts) pack.kind = OpKind::kConvert;
    pack.bytes = m.bytes;
    pack.copies_begin = copies_begin;
    pack.copies_end = static_cast<int>(plan_.copies.size());
    return {Space::kStaging, slot, 0};
  }

  // Member i of the tree: its Recv, an Unpack unless the message lands in place, and Forwards.
  void EmitMember(const Message& m, const Tree& tree, int root, int i) {
    const int rank = tree.Rank(i, root);
    const int parent = tree.size == 1 ? -1 : tree.shape.parent[i];
    const int from = parent < 0 ? m.sender : tree.shape.ranks[parent];
    const int recv_id = NewOp(OpKind::kRecv, rank, recv_round_[i]);
    {
      Op& recv = plan_.ops[recv_id];
      recv.peer = from;
      recv.bytes = m.bytes;
      recv.link = Link(from, rank);
      recv.message = message_of_[i];
    }
    // A message of one delivery to a member with one fragment of it (most): when that fragment's
    // place is contiguous the message lands there, and the member's Forwards relay it from there.
    const SortedDelivery& d0 = in_.order.deliveries[m.first];
    const int frag0 =
        m.last - m.first == 1 ? MemberFragment(d0, in_.routes.member_fragments, i) : kLookUp;
    if (frag0 != kLookUp && WireDType(d0.source_dtype, d0.dtype) == d0.dtype) {
      Box storage;
      const CopySide dst0 = FragmentSide(in_.dst_frags[frag0], d0.dtype, Space::kDestination,
                                         DeliveryBox(d0, storage));
      if (dst0.contiguous) {
        const DataPlace place{Space::kDestination, dst0.end.buffer, dst0.end.offset};
        plan_.ops[recv_id].data = place;
        Forward(tree, i, rank, place, m.bytes, recv_id);
        return;
      }
    }
    const int slot = plan_.AddSlot(rank, m.bytes);
    plan_.ops[recv_id].data = {Space::kStaging, slot, 0};
    EmitUnpack(m, i, rank, slot, recv_id);
    Forward(tree, i, rank, DataPlace{Space::kStaging, slot, 0}, m.bytes, recv_id);
  }

  // The Unpack of message `m` from `slot` into member i's (on `rank`) fragments, after its Recv;
  // a Convert when it widens a delivery from its WireDType to the destination dtype.
  void EmitUnpack(const Message& m, int i, int rank, int slot, int recv_id) {
    const int unpack_id = NewOp(OpKind::kUnpack, rank, recv_round_[i]);
    DependOn(unpack_id, recv_id);
    const int copies_begin = static_cast<int>(plan_.copies.size());
    int64_t offset = 0, unpacked = 0;
    bool converts = false;
    Box storage;
    for (int k = m.first; k < m.last; ++k) {
      const SortedDelivery& d = in_.order.deliveries[k];
      // The member's fragments of the piece: the one routing recorded, else the group's on it.
      const int frag = MemberFragment(d, in_.routes.member_fragments, i);
      const auto [lo, hi] =
          frag != kLookUp ? std::make_pair(&frag, &frag + 1) : FragmentsOnRank(*d.group, rank);
      const Box& box = DeliveryBox(d, storage);
      const DType wire = WireDType(d.source_dtype, d.dtype);
      converts = converts || wire != d.dtype;
      for (const int* it = lo; it != hi; ++it) {
        AppendBoxCopy(plan_, SlotSide(slot, offset, wire),
                      FragmentSide(in_.dst_frags[*it], d.dtype, Space::kDestination, box), box);
        unpacked += d.bytes;
      }
      offset += d.bytes;
    }
    Op& unpack = plan_.ops[unpack_id];
    if (converts) unpack.kind = OpKind::kConvert;
    unpack.bytes = unpacked;
    unpack.copies_begin = copies_begin;
    unpack.copies_end = static_cast<int>(plan_.copies.size());
  }

  // Member i (on `rank`) relays what its Recv `recv_id` landed (`bytes` at `data`) to each of
  // its children, one round after another.
  void Forward(const Tree& tree, int i, int rank, DataPlace data, int64_t bytes, int recv_id) {
    if (tree.size == 1) return;
    const int first_child = tree.shape.child_begin[i], end_child = tree.shape.child_begin[i + 1];
    for (int c = first_child; c < end_child; ++c) {
      const int child = tree.shape.children[c];
      const int peer = tree.shape.ranks[child];
      const int id = NewOp(OpKind::kForward, rank, recv_round_[i] + 1 + (c - first_child));
      Op& fwd = plan_.ops[id];
      fwd.peer = peer;
      fwd.bytes = bytes;
      fwd.link = Link(rank, peer);
      fwd.message = next_message_++;
      fwd.data = data;
      DependOn(id, recv_id);
      message_of_[child] = plan_.ops[id].message;
      recv_round_[child] = plan_.ops[id].round;
    }
  }

  // The destination fragments of group `g` on `rank`, a range of Intersection::group_frags.
  std::pair<const int*, const int*> FragmentsOnRank(const FragmentGroup& g, int rank) const {
    const std::vector<int>& dst_rank = in_.facts.destination_rank;
    const int* begin = in_.inter.group_frags.data() + g.frags_begin;
    const int* end = in_.inter.group_frags.data() + g.frags_end;
    const int* lo =
        std::lower_bound(begin, end, rank, [&](int f, int r) { return dst_rank[f] < r; });
    const int* hi = lo;
    while (hi != end && dst_rank[*hi] == rank) ++hi;
    return {lo, hi};
  }

  // Appends an op of `kind` on `rank` for the caller to fill in; returns its id.
  int NewOp(OpKind kind, int rank, int round) {
    const int id = static_cast<int>(plan_.ops.size());
    Op& op = plan_.ops.emplace_back();
    op.id = id;
    op.kind = kind;
    op.rank = rank;
    op.round = round;
    return id;
  }

  // Makes `dep` op `id`'s only dependency.
  void DependOn(int id, int dep) {
    Op& op = plan_.ops[id];
    op.deps_begin = static_cast<int>(plan_.dep_list.size());
    plan_.dep_list.push_back(dep);
    op.deps_end = op.deps_begin + 1;
  }

  LinkClass Link(int from, int to) const {
    const std::vector<int>& node_of = in_.facts.node_of_rank;
    if (from == to) return LinkClass::kSameRank;
    return node_of[from] == node_of[to] ? LinkClass::kSameNode : LinkClass::kNetwork;
  }

  const EmitInputs& in_;
  TransferPlan& plan_;
  int next_message_ = 0;
  // Per tree member, by position: the message it receives and its Recv's round (parents come
  // before their children, so a member's entries are written before they are read).
  std::vector<int> message_of_;
  std::vector<int> recv_round_;
};

}  // namespace

void EmitOps(const EmitInputs& in, TransferPlan& plan) { Emitter(in, plan).Run(); }

}  // namespace ferry
