// Reshard and gather-and-broadcast planners.
#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/layout/tensor_stack.h"
#include "planner/fold_stacks.h"
#include "planner/intersect.h"

namespace ferry {
namespace {

// Region of `box` (inside fragment f's box) in the fragment's buffer.
Region FragmentRegion(const Layout& layout, const Fragment& f, Space space, const Box& box) {
  Region r;
  r.space = space;
  r.buffer = f.loc.buffer;
  r.dtype = layout.tensors[f.tensor].dtype;
  const int64_t esize = DTypeSize(r.dtype);
  r.ndim = box.ndim;
  int64_t offset = f.loc.byte_offset;
  for (int d = 0; d < box.ndim; ++d) {
    offset += (box.lo[d] - f.box.lo[d]) * f.loc.strides[d] * esize;
    r.shape[d] = box.Extent(d);
    r.strides[d] = f.loc.strides[d];
  }
  r.offset = offset;
  return r;
}

// A dense row-major block of `box`'s shape at `offset` of staging slot `slot`.
Region SlotRegion(int slot, int64_t offset, DType dtype, const Box& box) {
  Region r;
  r.space = Space::kStaging;
  r.buffer = slot;
  r.offset = offset;
  r.dtype = dtype;
  r.ndim = box.ndim;
  int64_t stride = 1;
  for (int d = box.ndim - 1; d >= 0; --d) {
    r.shape[d] = box.Extent(d);
    r.strides[d] = stride;
    stride *= std::max<int64_t>(1, box.Extent(d));
  }
  return r;
}

// Fragment `index` of `table`.
struct FragmentAt {
  const FragmentTable* table;
  size_t index;
};

// One side of a copy pair whose shape is a box: a fragment's buffer or a dense staging block.
struct CopySide {
  CopyEnd end;              // strides null: dense row-major (stored without strides)
  bool contiguous = true;   // Region::IsContiguous of the side
};

// FragmentSide for boxes of `kDims` dims (any number when 0): the loop unrolls for the common 1, 2
// and 3 dims (3: slices of tensor stacks).
template <int kDims>
[[gnu::always_inline]] inline CopySide FragmentSideOfRank(const FragmentAt& f, DType dtype,
                                                          Space space, const Box& box) {
  CopySide s;
  s.end.space = space;
  s.end.buffer = f.table->Buffer(f.index);
  s.end.dtype = dtype;
  const int64_t esize = DTypeSize(dtype);
  int64_t offset = f.table->ByteOffset(f.index);
  const int n = kDims > 0 ? kDims : box.ndim;
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

// `box` (inside fragment f's box, of type `dtype`) in the fragment's buffer; the same place as
// FragmentRegion. Strides equal to the box's row-major strides are left out (dense).
[[gnu::always_inline]] inline CopySide FragmentSide(const FragmentAt& f, DType dtype, Space space,
                                                    const Box& box) {
  if (box.ndim == 2) return FragmentSideOfRank<2>(f, dtype, space, box);
  if (box.ndim == 3) return FragmentSideOfRank<3>(f, dtype, space, box);
  if (box.ndim == 1) return FragmentSideOfRank<1>(f, dtype, space, box);
  return FragmentSideOfRank<0>(f, dtype, space, box);
}

// A dense block at `offset` of staging slot `slot`; the same place as SlotRegion.
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
[[gnu::always_inline]] inline void AppendBoxCopy(TransferPlan& plan, const CopySide& from,
                                                 const CopySide& to, const Box& box) {
  std::array<int64_t, kMaxDims> shape;
  if (box.ndim == 2) {
    shape[0] = box.Extent(0);
    shape[1] = box.Extent(1);
    plan.AppendCopy(from.end, to.end, 2, shape.data());
    return;
  }
  int first = 0;
  while (box.ndim - first > 2 && box.Extent(first) == 1) ++first;
  for (int d = first; d < box.ndim; ++d) shape[d - first] = box.Extent(d);
  CopyEnd from_end = from.end, to_end = to.end;
  if (from_end.strides != nullptr) from_end.strides += first;
  if (to_end.strides != nullptr) to_end.strides += first;
  plan.AppendCopy(from_end, to_end, box.ndim - first, shape.data());
}

// Cuts `box` into boxes of at most `cap` bytes (at least one element each), in row-major order.
void ChunkBox(const Box& box, int64_t esize, int64_t cap, std::vector<Box>& out) {
  if (box.Volume() * esize <= cap) {
    out.push_back(box);
    return;
  }
  // Smallest dim whose one-index slab fits.
  int64_t inner = esize;
  std::array<int64_t, kMaxDims> slab{};
  for (int e = box.ndim - 1; e >= 0; --e) {
    slab[e] = inner;
    inner *= box.Extent(e);
  }
  int d = 0;
  while (d < box.ndim - 1 && slab[d] > cap) ++d;
  const int64_t step = std::max<int64_t>(1, cap / slab[d]);
  std::array<int64_t, kMaxDims> index{};
  for (int e = 0; e < d; ++e) index[e] = box.lo[e];
  while (true) {
    for (int64_t lo = box.lo[d]; lo < box.hi[d]; lo += step) {
      Box c = box;
      for (int e = 0; e < d; ++e) {
        c.lo[e] = index[e];
        c.hi[e] = index[e] + 1;
      }
      c.lo[d] = lo;
      c.hi[d] = std::min(box.hi[d], lo + step);
      out.push_back(c);
    }
    int e = d - 1;
    while (e >= 0 && ++index[e] == box.hi[e]) {
      index[e] = box.lo[e];
      --e;
    }
    if (e < 0) break;
  }
}

// Seconds since the previous call (the first call starts the clock).
class PhaseClock {
 public:
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The largest message for a delivery tree of `size` ranks whose first and last ranks are on nodes
// `first_node` and `last_node`: one rank, a chain inside one node, or a chain relayed between
// nodes' leaders (its ranks node by node, so its first and last ranks are on different nodes).
int64_t ChunkCap(const PlannerOptions& options, int size, int first_node, int last_node) {
  if (size == 1) return options.network_chunk_bytes;
  return first_node != last_node ? options.relay_chunk_bytes : options.fanout_chunk_bytes;
}

// One more than the highest rank owning a buffer of either table.
int NumRanksOf(const BufferTable& a, const BufferTable& b) {
  return std::max(a.NumRanks(), b.NumRanks());
}

Status CheckTopology(const Topology& topology, int num_ranks) {
  if (topology.NumRanks() < num_ranks) {
    return InvalidArgument("the topology has " + std::to_string(topology.NumRanks()) +
                           " ranks but the layouts use ranks up to " +
                           std::to_string(num_ranks - 1));
  }
  return Status::Ok();
}

// Delivery trees: tree id < num_ranks is the single rank `id`; larger ids index the table. Each
// interned tree also keeps its members' children, flat, for emission (which walks a tree once per
// message sent down it).
class TreeTable {
 public:
  explicit TreeTable(int num_ranks) : num_ranks_(num_ranks) {}
  // `ranks[i]`'s parent is ranks[parent[i]], or the sender when parent[i] < 0; parents first.
  // Trees are looked up by a hash of ranks and parents in an open-addressing table of tree ids,
  // each hit compared with the stored tree.
  int Intern(const std::vector<int>& ranks, const std::vector<int>& parent) {
    if (ranks.size() == 1) return ranks[0];
    const int size = static_cast<int>(ranks.size());
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < size; ++i) {
      h = (h ^ static_cast<uint32_t>(ranks[i])) * 0xff51afd7ed558ccdull;
      h = (h ^ static_cast<uint32_t>(parent[i])) * 0xff51afd7ed558ccdull;
    }
    if (2 * (begin_.size() + 1) > slots_.size()) Rehash();
    const size_t mask = slots_.size() - 1;
    size_t at = SlotOf(h, mask);
    for (;; at = (at + 1) & mask) {
      const int t = slots_[at];
      if (t < 0) break;
      const int begin = begin_[t];
      if (hashes_[t] == h && end_[t] - begin == size &&
          std::equal(ranks.begin(), ranks.end(), ranks_.begin() + begin) &&
          std::equal(parent.begin(), parent.end(), parent_.begin() + begin)) {
        return num_ranks_ + t;
      }
    }
    const int id = static_cast<int>(begin_.size());
    slots_[at] = id;
    hashes_.push_back(h);
    {
      const int begin = static_cast<int>(ranks_.size());
      begin_.push_back(begin);
      ranks_.insert(ranks_.end(), ranks.begin(), ranks.end());
      parent_.insert(parent_.end(), parent.begin(), parent.end());
      end_.push_back(static_cast<int>(ranks_.size()));
      // Member i's children are children_[child_begin_[c + i], child_begin_[c + i + 1]) with c
      // the tree's child_offset_, in member order: a counting sort of the members by parent.
      const int c = static_cast<int>(child_begin_.size());
      child_offset_.push_back(c);
      child_begin_.resize(static_cast<size_t>(c + size + 1), 0);
      children_.resize(static_cast<size_t>(begin + size));
      int* counts = child_begin_.data() + c;
      for (int i = 1; i < size; ++i) ++counts[parent[i] + 1];
      counts[0] = begin;
      for (int i = 0; i < size; ++i) counts[i + 1] += counts[i];
      fill_.assign(counts, counts + size);
      for (int i = 1; i < size; ++i) children_[fill_[parent[i]]++] = i;
    }
    return num_ranks_ + id;
  }
  int NumTrees() const { return num_ranks_ + static_cast<int>(begin_.size()); }
  int Size(int tree) const { return tree < num_ranks_ ? 1 : end_[tree - num_ranks_] - begin_[tree - num_ranks_]; }
  int Rank(int tree, int i) const { return tree < num_ranks_ ? tree : ranks_[begin_[tree - num_ranks_] + i]; }
  // An interned tree (tree >= num_ranks) as flat arrays: its member ranks, parents and, per member
  // i, its children (member indexes) children[child_begin[i] .. child_begin[i + 1]).
  struct Shape {
    const int* ranks;
    const int* parent;
    const int* child_begin;
    const int* children;
  };
  Shape ShapeOf(int tree) const {
    const int begin = begin_[tree - num_ranks_];
    return {ranks_.data() + begin, parent_.data() + begin,
            child_begin_.data() + child_offset_[tree - num_ranks_], children_.data()};
  }

 private:
  int num_ranks_;
  std::vector<int> begin_, end_, ranks_, parent_;
  std::vector<int> child_offset_;  // per tree, its members' first entry in child_begin_
  std::vector<int> child_begin_;   // per member, plus one past each tree's last
  std::vector<int> children_;      // by position in ranks_ (the last slot of a tree is unused)
  std::vector<int> fill_;
  std::vector<uint64_t> hashes_;  // per tree, its hash
  std::vector<int> slots_;        // the open-addressing table: tree index (id - num_ranks), or -1

  static size_t SlotOf(uint64_t hash, size_t mask) {
    return static_cast<size_t>(hash ^ (hash >> 29)) & mask;
  }
  // Doubles the table (at least 1024 slots) and reinserts every tree.
  void Rehash() {
    slots_.assign(std::max<size_t>(1024, slots_.size() * 2), -1);
    const size_t mask = slots_.size() - 1;
    for (size_t t = 0; t < hashes_.size(); ++t) {
      size_t at = SlotOf(hashes_[t], mask);
      while (slots_[at] >= 0) at = (at + 1) & mask;
      slots_[at] = static_cast<int>(t);
    }
  }
};

// One chunk of one piece bound for one delivery tree. Its candidates (the source fragments that
// may send it) are a range of the routing's candidate list: the piece's holders (indexes into
// Intersection::holders) for the network, or, past the holders, the piece's holders on the
// receiving rank's node for a direct intra-node delivery. 40 bytes: the planner makes one per
// piece, tree and chunk (159k for DeepSeek-V3's 57k pieces).
struct Delivery {
  int piece = 0;
  int chunk = -1;       // the chunk: the piece's box when < 0, else an index into the chunk boxes
  int64_t bytes = 0;
  int tree = 0;
  int cand_begin = 0, cand_end = 0;
  int sender_frag = -1;
  // Member i of the tree has its destination fragments of the piece's group at
  // member_fragments[members + i]: the fragment when it has exactly one (the usual case), else
  // kLookUp (search the group). A tree of one rank with one fragment f has members = ~f instead
  // (most deliveries: no list entry to write and read).
  int members = 0;
};
constexpr int kLookUp = -1;
// Member i's entry (see Delivery::members) of a Delivery or SortedDelivery.
template <typename AnyDelivery>
inline int MemberFragment(const AnyDelivery& d, const std::vector<int>& member_fragments,
                          int i) {
  return d.members < 0 ? ~d.members : member_fragments[static_cast<size_t>(d.members + i)];
}

// A delivery as emission reads it, in message order: its box (the chunk's when cut; for a member
// cut its group's box, cut at `member`), group, dtype, size, tree, sender and tree members'
// fragments (as Delivery::members). 40 bytes.
struct SortedDelivery {
  const Box* box = nullptr;
  const FragmentGroup* group = nullptr;
  int64_t bytes = 0;
  int tree = 0;
  int sender_frag = -1;
  int members = 0;
  DType dtype = DType::kUInt8;
  int16_t member = -1;  // Intersection::MemberOf the piece (at most kMaxMemberCut), or -1
};
static_assert(sizeof(SortedDelivery) == 40, "emission reads one record per delivery");
static_assert(Intersection::kMaxMemberCut <= INT16_MAX, "a member cut fits SortedDelivery::member");

// The box of delivery `d`: the one it points to, or for a member cut that box cut at its member,
// built into `storage`. `kMemberCuts` false: no delivery is a member cut.
template <bool kMemberCuts>
inline const Box& DeliveryBox(const SortedDelivery& d, Box& storage) {
  if (!kMemberCuts || d.member < 0) return *d.box;
  storage = *d.box;
  Intersection::CutAtMember(storage, d.member);
  return storage;
}

// The box of piece `p`: where it is stored, else (a member cut) built into `storage`.
inline const Box& PieceBox(const Intersection& inter, const Piece& p, Box& storage) {
  if (const Box* stored = inter.StoredBoxOf(p)) return *stored;
  storage = inter.BoxOf(p);
  return storage;
}

// A destination fragment of piece `piece` on a rank that also holds it (source fragment `src`).
struct LocalCopy {
  int rank, piece, src, dst;
};

struct Message {
  int sender = 0;
  int tree = 0;
  int first = 0, last = 0;  // range of deliveries (sorted by sender, distance, tree, index)
  int64_t bytes = 0;
};

// The dtype of each of `layout`'s tensors, by index.
std::vector<DType> DTypesOf(const Layout& layout) {
  std::vector<DType> dtypes;
  dtypes.reserve(layout.tensors.size());
  for (const TensorSpec& t : layout.tensors) dtypes.push_back(t.dtype);
  return dtypes;
}

// Compact facts the planner's passes read many times (a fragment's record is 96 bytes, so reading
// its rank again and again costs a cache miss each time).
struct PlanFacts {
  std::vector<int> node_of_rank;
  const std::vector<int>& source_rank;       // by source fragment (the intersection's)
  const std::vector<int>& destination_rank;  // by destination fragment
  std::vector<int64_t> piece_bytes;   // by piece of the intersection
  std::vector<DType> piece_dtype;     // by piece

  PlanFacts(const Intersection& inter, const std::vector<DType>& dtype_of_destination_tensor,
            const Topology& topology)
      : source_rank(inter.source_ranks), destination_rank(inter.destination_ranks) {
    node_of_rank.resize(topology.ranks.size());
    for (size_t r = 0; r < topology.ranks.size(); ++r) node_of_rank[r] = topology.ranks[r].node;
    piece_bytes.resize(inter.pieces.size());
    piece_dtype.resize(inter.pieces.size());
    for (size_t p = 0; p < inter.pieces.size(); ++p) {
      const DType dtype =
          dtype_of_destination_tensor[inter.groups[inter.pieces[p].group].dst_tensor];
      piece_dtype[p] = dtype;
      const Piece& piece = inter.pieces[p];
      piece_bytes[p] = inter.VolumeOf(piece) * DTypeSize(dtype);
    }
  }
};

// The holders of the piece at hand: on which nodes they are, how many nodes, and a holder
// fragment per rank. Marks are kept while consecutive pieces share one holder range (the pieces
// of a tensor its source holds whole), so their holders are looked up once per range.
class HolderMarks {
 public:
  HolderMarks(const Intersection& inter, const PlanFacts& facts, int num_ranks, int num_nodes)
      : inter_(inter), facts_(facts), rank_holder_(num_ranks, -1), node_mark_(num_nodes, -1) {}
  // Marks `piece`'s holders, unless they are the range marked already.
  void Mark(const Piece& piece) {
    if (piece.holders_begin == begin_ && piece.holders_end == end_) return;
    for (int h = begin_; h < end_; ++h) rank_holder_[facts_.source_rank[inter_.holders[h]]] = -1;
    ++generation_;
    begin_ = piece.holders_begin;
    end_ = piece.holders_end;
    holder_nodes_ = 0;
    only_node_ = -1;
    for (int h = begin_; h < end_; ++h) {
      const int rank = facts_.source_rank[inter_.holders[h]];
      const int node = facts_.node_of_rank[rank];
      rank_holder_[rank] = inter_.holders[h];
      if (node_mark_[node] != generation_) {
        node_mark_[node] = generation_;
        ++holder_nodes_;
        only_node_ = node;
      }
    }
  }
  // A holder fragment on `rank` (the last in holder order), or -1.
  int HolderOn(int rank) const { return rank_holder_[rank]; }
  bool HeldOnNode(int node) const { return node_mark_[node] == generation_; }
  // The number of nodes holding the piece, and the one when it is one.
  int HolderNodes() const { return holder_nodes_; }
  int OnlyNode() const { return only_node_; }

 private:
  const Intersection& inter_;
  const PlanFacts& facts_;
  std::vector<int> rank_holder_;
  std::vector<int> node_mark_;  // the generation that last marked the node as a holder's
  int generation_ = -1;
  int begin_ = -1, end_ = -1;  // the holder range marked
  int holder_nodes_ = 0, only_node_ = -1;
};

// What the layouts force onto the network: per piece, each destination node without a holder
// needs it once.
NetworkDemand ComputeDemand(const Intersection& inter, const PlanFacts& facts, int num_nodes) {
  const std::vector<int>& node_of = facts.node_of_rank;
  NetworkDemand demand;
  demand.destination_node_bytes.assign(num_nodes, 0);
  demand.source_node_bytes.assign(num_nodes, 0);
  {
    std::vector<char> holder_node(num_nodes, 0);
    for (int rank : facts.source_rank) {
      if (rank >= 0) holder_node[node_of[rank]] = 1;  // a fragment stack folding took reads -1
    }
    demand.source_nodes = static_cast<int>(std::count(holder_node.begin(), holder_node.end(), 1));
  }
  HolderMarks holders(inter, facts, static_cast<int>(facts.node_of_rank.size()), num_nodes);
  std::vector<int> needed(num_nodes, -1);  // piece index that last counted the node
  for (size_t p = 0; p < inter.pieces.size(); ++p) {
    const Piece& piece = inter.pieces[p];
    const FragmentGroup& g = inter.groups[piece.group];
    const int64_t bytes = facts.piece_bytes[p];
    holders.Mark(piece);
    if (g.frags_end - g.frags_begin == 1) {
      // One destination fragment: needed on its node unless a holder is there.
      const int node = node_of[facts.destination_rank[inter.group_frags[g.frags_begin]]];
      if (!holders.HeldOnNode(node)) {
        demand.destination_node_bytes[node] += bytes;
        demand.must_leave_bytes += bytes;
        if (holders.HolderNodes() == 1) demand.source_node_bytes[holders.OnlyNode()] += bytes;
      }
      continue;
    }
    bool must_leave = false;
    for (int i = g.frags_begin; i < g.frags_end; ++i) {
      const int node = node_of[facts.destination_rank[inter.group_frags[i]]];
      if (holders.HeldOnNode(node) || needed[node] == static_cast<int>(p)) continue;
      needed[node] = static_cast<int>(p);
      demand.destination_node_bytes[node] += bytes;
      must_leave = true;
    }
    if (must_leave) {
      demand.must_leave_bytes += bytes;
      if (holders.HolderNodes() == 1) demand.source_node_bytes[holders.OnlyNode()] += bytes;
    }
  }
  return demand;
}

}  // namespace

std::string_view StrategyName(Strategy strategy) {
  return strategy == Strategy::kReshard ? "reshard" : "gather-broadcast";
}

Result<Strategy> ParseStrategy(std::string_view name) {
  if (name == "reshard") return Strategy::kReshard;
  if (name == "gather-broadcast") return Strategy::kGatherBroadcast;
  return InvalidArgument("unknown strategy '" + std::string(name) +
                         "' (expected reshard or gather-broadcast)");
}

namespace {

// Fragments by id: a layout's own, then (ids from its count on) those of its stack layout.
class FragmentsById {
 public:
  FragmentsById(const Layout& layout, const Layout* stacks)
      : own_(&layout.fragments),
        count_(layout.fragments.size()),
        stacked_(stacks != nullptr ? &stacks->fragments : nullptr) {}
  FragmentAt operator[](size_t id) const {
    return id < count_ ? FragmentAt{own_, id} : FragmentAt{stacked_, id - count_};
  }

 private:
  const FragmentTable* own_;
  size_t count_;
  const FragmentTable* stacked_;
};

// What emission reads: the intersection, the routed and selected deliveries (sorted by message)
// and the messages in round order.
struct EmitInputs {
  const Intersection& inter;
  const PlanFacts& facts;
  const FragmentsById& src_frags;
  const FragmentsById& dst_frags;
  const TreeTable& trees;
  const std::vector<LocalCopy>& local_copies;
  const std::vector<SortedDelivery>& deliveries;
  const std::vector<int>& member_fragments;
  const std::vector<Message>& messages;
  int num_ranks;
};

// Appends the plan's ops, slots, deps and copy pairs. A function of its own (not inlined into the
// planner) so that the compiler allocates registers for this loop alone. `kMemberCuts`: whether
// any delivery is a member cut (SortedDelivery::member); without, its boxes are read as they are.
template <bool kMemberCuts>
[[gnu::noinline]] void EmitOps(const EmitInputs& in, TransferPlan& plan) {
  const Intersection& inter = in.inter;
  const PlanFacts& facts = in.facts;
  const FragmentsById& src_frags = in.src_frags;
  const FragmentsById& dst_frags = in.dst_frags;
  const TreeTable& trees = in.trees;
  const std::vector<LocalCopy>& local_copies = in.local_copies;
  const std::vector<SortedDelivery>& deliveries = in.deliveries;
  const std::vector<int>& member_fragments = in.member_fragments;
  const std::vector<Message>& messages = in.messages;
  const int num_ranks = in.num_ranks;
  const std::vector<int>& dst_rank = facts.destination_rank;
  const std::vector<int>& node_of = facts.node_of_rank;
  // The destination fragments of group `g` on `rank`, a range of Intersection::group_frags: what
  // emission reads for a tree member whose fragment routing left as kLookUp (a group of one
  // fragment never is: its delivery carries that fragment).
  auto fragments_on_rank = [&](const FragmentGroup& g, int rank) {
    const int* begin = inter.group_frags.data() + g.frags_begin;
    const int* end = inter.group_frags.data() + g.frags_end;
    const int* lo =
        std::lower_bound(begin, end, rank, [&](int f, int r) { return dst_rank[f] < r; });
    const int* hi = lo;
    while (hi != end && dst_rank[*hi] == rank) ++hi;
    return std::make_pair(lo, hi);
  };
  // Member cuts' boxes are built here (DeliveryBox, PieceBox): one for a message's first
  // delivery, read throughout the message, and one for the delivery at hand.
  Box member_box, first_member_box;
  // Emit ops. Local copies first: one Copy op per rank, copies in piece order (a stable counting
  // sort by rank).
  {
    // Upper bounds: per message a Pack and a Send, per tree member a Recv, an Unpack and a Forward
    // to each child (one per member but the root); a copy pair per delivery on the sender and per
    // destination fragment on each member; a dep per Send, Unpack and Forward.
    size_t ops_bound = static_cast<size_t>(num_ranks), slots_bound = 0, deps_bound = 0;
    size_t copies_bound = local_copies.size();
    for (const Message& m : messages) {
      const size_t size = static_cast<size_t>(trees.Size(m.tree));
      const size_t count = static_cast<size_t>(m.last - m.first);
      ops_bound += 2 + 3 * size;
      slots_bound += 1 + size;
      deps_bound += 1 + 2 * size;
      copies_bound += count * (1 + size);
    }
    plan.ops.reserve(ops_bound);
    plan.slots.reserve(slots_bound);
    plan.dep_list.reserve(deps_bound);
    plan.copies.reserve(copies_bound);
  }
  {
    std::vector<int> rank_begin(num_ranks + 1, 0);
    for (const LocalCopy& c : local_copies) ++rank_begin[c.rank + 1];
    for (int r = 0; r < num_ranks; ++r) rank_begin[r + 1] += rank_begin[r];
    std::vector<int> by_rank(local_copies.size());
    std::vector<int> fill(rank_begin.begin(), rank_begin.end() - 1);
    for (size_t i = 0; i < local_copies.size(); ++i) {
      by_rank[fill[local_copies[i].rank]++] = static_cast<int>(i);
    }
    for (int r = 0; r < num_ranks; ++r) {
      if (rank_begin[r] == rank_begin[r + 1]) continue;
      Op op;
      op.kind = OpKind::kCopy;
      op.rank = r;
      op.link = LinkClass::kSameRank;
      op.copies_begin = static_cast<int>(plan.copies.size());
      for (int k = rank_begin[r]; k < rank_begin[r + 1]; ++k) {
        const LocalCopy& c = local_copies[by_rank[k]];
        const Box& box = PieceBox(inter, inter.pieces[c.piece], member_box);
        const FragmentAt dst = dst_frags[c.dst];
        const DType dtype = facts.piece_dtype[c.piece];
        AppendBoxCopy(plan, FragmentSide(src_frags[c.src], dtype, Space::kSource, box),
                      FragmentSide(dst, dtype, Space::kDestination, box), box);
        op.bytes += facts.piece_bytes[c.piece];
      }
      op.copies_end = static_cast<int>(plan.copies.size());
      plan.AddOp(std::move(op));
    }
  }
  // Appends `dep` to the plan's dep list as `op`'s only dependency.
  auto depend_on = [&plan](Op& op, int dep) {
    op.deps_begin = static_cast<int>(plan.dep_list.size());
    plan.dep_list.push_back(dep);
    op.deps_end = op.deps_begin + 1;
  };
  // Appends an op of `kind` on `rank` in place (assigning its id) for the caller to fill in.
  int next_id = static_cast<int>(plan.ops.size());
  auto new_op = [&plan, &next_id](OpKind kind, int rank, int round) -> Op& {
    Op& op = plan.ops.emplace_back();
    op.id = next_id++;
    op.kind = kind;
    op.rank = rank;
    op.round = round;
    return op;
  };
  // Topology::Link on the node table already at hand.
  auto link = [&node_of](int from, int to) {
    if (from == to) return LinkClass::kSameRank;
    return node_of[from] == node_of[to] ? LinkClass::kSameNode : LinkClass::kNetwork;
  };
  // Per tree member, by position: the message it receives and its Recv's round (parents come
  // before their children, so a member's entries are written before they are read).
  std::vector<int> message_of;
  std::vector<int> recv_round;
  int next_message = 0;
  // Member i (on `rank`) of a tree of `shape` relays what its Recv `recv_id` landed (`bytes` at
  // `data`) to each of its children, children[first_child, end_child), one round after another.
  auto forward = [&](const TreeTable::Shape& shape, int first_child, int end_child, int i, int rank,
                     DataPlace data, int64_t bytes, int recv_id) {
    for (int c = first_child; c < end_child; ++c) {
      const int child = shape.children[c];
      const int peer = shape.ranks[child];
      Op& fwd = new_op(OpKind::kForward, rank, recv_round[i] + 1 + (c - first_child));
      fwd.peer = peer;
      fwd.bytes = bytes;
      fwd.link = link(rank, peer);
      fwd.message = next_message++;
      fwd.data = data;
      depend_on(fwd, recv_id);
      message_of[child] = fwd.message;
      recv_round[child] = fwd.round;
    }
  };
  int round = 0;
  int last_sender = -1;
  for (size_t mi = 0; mi < messages.size(); ++mi) {
    const Message& m = messages[mi];
    round = m.sender == last_sender ? round + 1 : 0;
    last_sender = m.sender;
    const int count = m.last - m.first;
    const SortedDelivery& d0 = deliveries[m.first];
    // Built at each use: holding the reference across the message costs the loops below registers.
    auto box0 = [&]() -> const Box& { return DeliveryBox<kMemberCuts>(d0, first_member_box); };
    // The tree: one rank (no children), or an interned shape.
    const int size = trees.Size(m.tree);
    const bool single = size == 1;
    const TreeTable::Shape shape = single ? TreeTable::Shape{} : trees.ShapeOf(m.tree);
    const int root = single ? m.tree : shape.ranks[0];
    // Sender side: a Pack into a staging slot unless one contiguous region is sent as it lies.
    DataPlace sent;
    int pack_id = -1;
    {
      const CopySide src0 =
          FragmentSide(src_frags[d0.sender_frag], d0.dtype, Space::kSource, box0());
      if (count == 1 && src0.contiguous) {
        sent = {Space::kSource, src0.end.buffer, src0.end.offset};
      } else {
        const int slot = plan.AddSlot(m.sender, m.bytes);
        Op& pack = new_op(OpKind::kPack, m.sender, round);
        pack.bytes = m.bytes;
        pack.copies_begin = static_cast<int>(plan.copies.size());
        int64_t offset = 0;
        AppendBoxCopy(plan, src0, SlotSide(slot, 0, d0.dtype), box0());
        offset += d0.bytes;
        for (int k = m.first + 1; k < m.last; ++k) {
          const SortedDelivery& d = deliveries[k];
          const Box& box = DeliveryBox<kMemberCuts>(d, member_box);
          AppendBoxCopy(plan, FragmentSide(src_frags[d.sender_frag], d.dtype, Space::kSource, box),
                        SlotSide(slot, offset, d.dtype), box);
          offset += d.bytes;
        }
        pack.copies_end = static_cast<int>(plan.copies.size());
        pack_id = pack.id;
        sent = {Space::kStaging, slot, 0};
      }
    }
    {
      Op& send = new_op(OpKind::kSend, m.sender, round);
      send.peer = root;
      send.bytes = m.bytes;
      send.link = link(m.sender, root);
      send.message = next_message++;
      send.data = sent;
      if (pack_id >= 0) depend_on(send, pack_id);
      if (static_cast<int>(message_of.size()) < size) {
        message_of.resize(size);
        recv_round.resize(size);
      }
      message_of[0] = send.message;
      recv_round[0] = round;
    }
    // Tree side: per member a Recv (into its fragment when that is the one contiguous place the
    // message is for, else into a slot, then an Unpack), and a Forward to each child of what the
    // Recv landed.
    for (int i = 0; i < size; ++i) {
      const int rank = single ? root : shape.ranks[i];
      const int parent = single ? -1 : shape.parent[i];
      const int from = parent < 0 ? m.sender : shape.ranks[parent];
      const int first_child = single ? 0 : shape.child_begin[i];
      const int end_child = single ? 0 : shape.child_begin[i + 1];
      Op& recv = new_op(OpKind::kRecv, rank, recv_round[i]);
      recv.peer = from;
      recv.bytes = m.bytes;
      recv.link = link(from, rank);
      recv.message = message_of[i];
      // A message of one delivery to a member with one fragment of it (most): that fragment's
      // place. When it is contiguous the message lands there, and the member's Forwards relay it
      // from there: no staging slot, no Unpack.
      const int frag0 = count == 1 ? MemberFragment(d0, member_fragments, i) : kLookUp;
      CopySide dst0;
      if (frag0 != kLookUp) {
        dst0 = FragmentSide(dst_frags[frag0], d0.dtype, Space::kDestination, box0());
      }
      const int recv_id = recv.id;
      if (frag0 != kLookUp && dst0.contiguous) {
        recv.data = {Space::kDestination, dst0.end.buffer, dst0.end.offset};
        forward(shape, first_child, end_child, i, rank, recv.data, m.bytes, recv_id);
        continue;
      }
      const int slot = plan.AddSlot(rank, m.bytes);
      recv.data = {Space::kStaging, slot, 0};
      Op& unpack = new_op(OpKind::kUnpack, rank, recv_round[i]);
      depend_on(unpack, recv_id);
      unpack.copies_begin = static_cast<int>(plan.copies.size());
      int64_t offset = 0;
      int64_t unpacked = 0;
      if (frag0 != kLookUp) {
        AppendBoxCopy(plan, SlotSide(slot, 0, d0.dtype), dst0, box0());
        unpacked = d0.bytes;
      }
      for (int k = frag0 != kLookUp ? m.last : m.first; k < m.last; ++k) {
        const SortedDelivery& d = deliveries[k];
        // The member's fragments of the piece: the one routing recorded, else the group's on it.
        const int frag = MemberFragment(d, member_fragments, i);
        const auto [lo, hi] =
            frag != kLookUp ? std::make_pair(&frag, &frag + 1) : fragments_on_rank(*d.group, rank);
        for (const int* it = lo; it != hi; ++it) {
          const Box& box = DeliveryBox<kMemberCuts>(d, member_box);
          AppendBoxCopy(plan, SlotSide(slot, offset, d.dtype),
                        FragmentSide(dst_frags[*it], d.dtype, Space::kDestination, box), box);
          unpacked += d.bytes;
        }
        offset += d.bytes;
      }
      unpack.bytes = unpacked;
      unpack.copies_end = static_cast<int>(plan.copies.size());
      forward(shape, first_child, end_child, i, rank, DataPlace{Space::kStaging, slot, 0}, m.bytes,
              recv_id);
    }
  }
}

// What routing makes of the intersection: local copies, and deliveries (one per piece, tree and
// chunk) whose candidates are piece holders or, past them, entries of intra_pool.
struct Routes {
  std::vector<LocalCopy> local_copies;
  std::vector<Delivery> deliveries;
  std::vector<int> intra_pool;        // same-node holders, candidates numbered after the holders
  std::vector<Box> chunk_boxes;       // the boxes of deliveries that carry part of a piece
  std::vector<int> member_fragments;  // tree members' fragments (Delivery::members)
};

// Routing: local copies, intra-node deliveries and network deliveries (chunked), their trees
// interned in `trees`. A function of its own (not inlined into the planner) so that the compiler
// allocates registers for this loop alone.
[[gnu::noinline]] void RouteDeliveries(const Intersection& inter, const PlanFacts& facts,
                                       const PlannerOptions& options, bool relay, int num_ranks,
                                       int num_nodes, TreeTable& trees, Routes& routes) {
  std::vector<LocalCopy>& local_copies = routes.local_copies;
  std::vector<Delivery>& deliveries = routes.deliveries;
  std::vector<int>& intra_pool = routes.intra_pool;
  std::vector<Box>& chunk_boxes = routes.chunk_boxes;
  std::vector<int>& member_fragments = routes.member_fragments;
  const std::vector<int>& src_rank = facts.source_rank;
  const std::vector<int>& dst_rank = facts.destination_rank;
  std::vector<int64_t> leader_load(num_ranks, 0);
  Box member_box;  // a member cut's box, built to be chunked
  std::vector<Box> chunks;
  // Adds `d` for piece p (`bytes` long) once per chunk of at most `cap` bytes (the piece whole
  // when it fits).
  auto add_chunks = [&](Delivery d, size_t p, int64_t cap) {
    if (facts.piece_bytes[p] <= cap) {
      d.chunk = -1;
      d.bytes = facts.piece_bytes[p];
      deliveries.push_back(d);
      return;
    }
    const int64_t esize = DTypeSize(facts.piece_dtype[p]);
    chunks.clear();
    ChunkBox(PieceBox(inter, inter.pieces[p], member_box), esize, cap, chunks);
    for (const Box& c : chunks) {
      d.chunk = static_cast<int>(chunk_boxes.size());
      chunk_boxes.push_back(c);
      d.bytes = c.Volume() * esize;
      deliveries.push_back(d);
    }
  };
  const std::vector<int>& node_of = facts.node_of_rank;
  std::vector<int> member_ranks;
  std::vector<int> local_holders;
  std::vector<int> tree_ranks, tree_parent;
  std::vector<int> net_node_begin;  // per network node: range into net_ranks
  std::vector<int> net_ranks;
  // Delivery::members of a tree of one rank whose fragment is `frag` (or kLookUp).
  auto one_member = [&member_fragments](int frag) {
    if (frag != kLookUp) return ~frag;
    member_fragments.push_back(kLookUp);
    return static_cast<int>(member_fragments.size()) - 1;
  };
  // Per rank, piece-local, its one fragment of the piece's group (kLookUp: several).
  std::vector<int> rank_fragment(num_ranks, kLookUp);
  HolderMarks holders(inter, facts, num_ranks, num_nodes);
  const int num_holders = static_cast<int>(inter.holders.size());
  // About one delivery per destination fragment and network node or chunk (159k of DeepSeek-V3's
  // 263k, 415k of Kimi-K2's 530k), and a member entry per fan-out member: reserving for each
  // destination fragment spares most regrowth copies, and only what is written is touched.
  deliveries.reserve(std::max(inter.pieces.size(), inter.group_frags.size()));
  member_fragments.reserve(inter.group_frags.size());
  for (size_t p = 0; p < inter.pieces.size(); ++p) {
    const Piece& piece = inter.pieces[p];
    const FragmentGroup& g = inter.groups[piece.group];
    const int64_t piece_bytes = facts.piece_bytes[p];
    holders.Mark(piece);
    if (g.frags_end - g.frags_begin == 1) {
      // One destination fragment (most pieces of expert weights): the general path below reduced
      // to its outcome. A holder on the rank copies locally (the last such holder, as there);
      // else holders on the rank's node deliver directly; else the network, to a tree of one.
      const int frag = inter.group_frags[g.frags_begin];
      const int rank = dst_rank[frag];
      const int node = node_of[rank];
      const int local = holders.HolderOn(rank);
      const bool on_node = holders.HeldOnNode(node);
      if (local >= 0) {
        local_copies.push_back({rank, static_cast<int>(p), local, frag});
        continue;
      }
      Delivery d;
      d.piece = static_cast<int>(p);
      d.tree = rank;
      d.members = one_member(frag);
      if (on_node) {
        d.cand_begin = num_holders + static_cast<int>(intra_pool.size());
        for (int h = piece.holders_begin; h < piece.holders_end; ++h) {
          if (node_of[src_rank[inter.holders[h]]] == node) intra_pool.push_back(inter.holders[h]);
        }
        d.cand_end = num_holders + static_cast<int>(intra_pool.size());
      } else {
        if (options.hierarchical) leader_load[rank] += piece_bytes;
        d.cand_begin = piece.holders_begin;
        d.cand_end = piece.holders_end;
      }
      add_chunks(d, p, options.network_chunk_bytes);
      continue;
    }
    // Members: distinct ranks of the group, by rank (group_frags is sorted by rank).
    member_ranks.clear();
    for (int i = g.frags_begin; i < g.frags_end; ++i) {
      const int rank = dst_rank[inter.group_frags[i]];
      if (holders.HolderOn(rank) >= 0) {
        local_copies.push_back(
            {rank, static_cast<int>(p), holders.HolderOn(rank), inter.group_frags[i]});
        continue;
      }
      if (member_ranks.empty() || member_ranks.back() != rank) {
        member_ranks.push_back(rank);
        rank_fragment[rank] = inter.group_frags[i];
      } else {
        rank_fragment[rank] = kLookUp;
      }
    }
    // Order members by (node, rank); ranks numbered node by node are already in that order.
    auto by_node = [&](int a, int b) { return node_of[a] < node_of[b]; };
    if (!std::is_sorted(member_ranks.begin(), member_ranks.end(), by_node)) {
      std::stable_sort(member_ranks.begin(), member_ranks.end(), by_node);
    }
    net_node_begin.clear();
    net_ranks.clear();
    for (size_t i = 0; i < member_ranks.size();) {
      const int node = node_of[member_ranks[i]];
      size_t j = i;
      while (j < member_ranks.size() && node_of[member_ranks[j]] == node) ++j;
      local_holders.clear();
      if (holders.HeldOnNode(node)) {
        for (int h = piece.holders_begin; h < piece.holders_end; ++h) {
          if (node_of[src_rank[inter.holders[h]]] == node) local_holders.push_back(inter.holders[h]);
        }
      }
      if (!local_holders.empty()) {
        // A holder on the node: direct intra-node deliveries.
        const int cand_begin = num_holders + static_cast<int>(intra_pool.size());
        intra_pool.insert(intra_pool.end(), local_holders.begin(), local_holders.end());
        const int cand_end = num_holders + static_cast<int>(intra_pool.size());
        for (size_t k = i; k < j; ++k) {
          Delivery d;
          d.piece = static_cast<int>(p);
          d.tree = member_ranks[k];
          d.members = one_member(rank_fragment[member_ranks[k]]);
          d.cand_begin = cand_begin;
          d.cand_end = cand_end;
          add_chunks(d, p, options.network_chunk_bytes);
        }
      } else if (options.hierarchical) {
        // Leader: the least-loaded member; the chain continues cyclically by rank.
        size_t best = i;
        for (size_t k = i + 1; k < j; ++k) {
          if (leader_load[member_ranks[k]] < leader_load[member_ranks[best]]) best = k;
        }
        leader_load[member_ranks[best]] += piece_bytes;
        net_node_begin.push_back(static_cast<int>(net_ranks.size()));
        for (size_t k = best; k < j; ++k) net_ranks.push_back(member_ranks[k]);
        for (size_t k = i; k < best; ++k) net_ranks.push_back(member_ranks[k]);
      } else {
        for (size_t k = i; k < j; ++k) {
          net_node_begin.push_back(static_cast<int>(net_ranks.size()));
          net_ranks.push_back(member_ranks[k]);
        }
      }
      i = j;
    }
    net_node_begin.push_back(static_cast<int>(net_ranks.size()));
    const int net_nodes = static_cast<int>(net_node_begin.size()) - 1;
    // Trees: one per network node, or one relayed chain of node leaders.
    auto emit_tree = [&](int first_node, int count) {
      if (count == 1 && net_node_begin[first_node + 1] - net_node_begin[first_node] == 1) {
        // A tree of one rank (the piece's only member on that node): the rank is the tree.
        const int rank = net_ranks[net_node_begin[first_node]];
        Delivery d;
        d.piece = static_cast<int>(p);
        d.tree = rank;
        d.members = one_member(rank_fragment[rank]);
        d.cand_begin = piece.holders_begin;
        d.cand_end = piece.holders_end;
        add_chunks(d, p, options.network_chunk_bytes);
        return;
      }
      tree_ranks.clear();
      tree_parent.clear();
      int prev_leader = -1;
      for (int k = 0; k < count; ++k) {
        const int n = (first_node + k) % net_nodes;
        const int leader_pos = static_cast<int>(tree_ranks.size());
        for (int r = net_node_begin[n]; r < net_node_begin[n + 1]; ++r) {
          tree_parent.push_back(r == net_node_begin[n] ? prev_leader : static_cast<int>(tree_ranks.size()) - 1);
          tree_ranks.push_back(net_ranks[r]);
        }
        prev_leader = leader_pos;
      }
      const int tree = trees.Intern(tree_ranks, tree_parent);
      Delivery d;
      d.piece = static_cast<int>(p);
      d.tree = tree;
      d.members = static_cast<int>(member_fragments.size());
      for (int rank : tree_ranks) member_fragments.push_back(rank_fragment[rank]);
      d.cand_begin = piece.holders_begin;
      d.cand_end = piece.holders_end;
      add_chunks(d, p,
                 ChunkCap(options, static_cast<int>(tree_ranks.size()), node_of[tree_ranks.front()],
                          node_of[tree_ranks.back()]));
    };
    if (net_nodes > 0) {
      if (relay && net_nodes > 1) {
        emit_tree(static_cast<int>(p % net_nodes), net_nodes);
      } else {
        for (int n = 0; n < net_nodes; ++n) emit_tree(n, 1);
      }
    }
  }
}

// The reshard planner proper, on the layouts as given or (with `fold`) on the layouts without
// their folded fragments plus the stack layouts, whose fragments and tensors are numbered after
// the layouts' own. `clock` started with the planning; `fold_seconds` is already spent.
Result<PlanResult> PlanReshardOf(const Layout& source, const Layout& destination, StackFold* fold,
                                 const Topology& topology, const PlannerOptions& options,
                                 PhaseClock& clock, double fold_seconds) {
  // The plan's compact copies of the buffer tables, made first: the ranks are counted on them.
  PlanResult result;
  result.phases.fold = fold_seconds;
  TransferPlan& plan = result.plan;
  plan.source_buffers = source.buffers;
  plan.destination_buffers = destination.buffers;
  const int num_ranks = NumRanksOf(plan.source_buffers, plan.destination_buffers);
  FERRY_RETURN_IF_ERROR(CheckTopology(topology, num_ranks));
  Intersection inter;
  std::vector<DType> dtype_of_destination_tensor = DTypesOf(destination);
  if (fold != nullptr) {
    FERRY_ASSIGN_OR_RETURN(
        inter, IntersectLayouts(source, destination, &fold->source, &fold->destination));
    FERRY_ASSIGN_OR_RETURN(Intersection stacked,
                           IntersectLayouts(fold->source.stacks(), fold->destination.stacks()));
    AppendIntersection(inter, std::move(stacked), static_cast<int>(source.tensors.size()),
                       static_cast<int>(destination.tensors.size()));
    const std::vector<DType> stacked_dtypes = DTypesOf(fold->destination.stacks());
    dtype_of_destination_tensor.insert(dtype_of_destination_tensor.end(), stacked_dtypes.begin(),
                                       stacked_dtypes.end());
  } else {
    FERRY_ASSIGN_OR_RETURN(inter, IntersectLayouts(source, destination));
  }
  const FragmentsById src_frags(source, fold != nullptr ? &fold->source.stacks() : nullptr);
  const FragmentsById dst_frags(destination,
                                fold != nullptr ? &fold->destination.stacks() : nullptr);
  const int num_nodes = std::max(1, topology.NumNodes());

  plan.strategy = "reshard";
  plan.num_ranks = num_ranks;

  const PlanFacts facts(inter, dtype_of_destination_tensor, topology);
  const std::vector<int>& src_rank = facts.source_rank;
  result.demand = ComputeDemand(inter, facts, num_nodes);
  const NetworkDemand& demand = result.demand;
  const LowerBound bound = ComputeLowerBound(demand, topology);
  const bool relay = options.relay == RelayMode::kOn ||
                     (options.relay == RelayMode::kAuto &&
                      bound.source_egress_seconds > bound.destination_ingress_seconds);
  result.phases.intersect = clock.Lap();

  // Routing: local copies, intra-node deliveries and network deliveries (chunked).
  TreeTable trees(num_ranks);
  Routes routes;
  RouteDeliveries(inter, facts, options, relay, num_ranks, num_nodes, trees, routes);
  const std::vector<LocalCopy>& local_copies = routes.local_copies;
  std::vector<Delivery>& deliveries = routes.deliveries;
  const std::vector<int>& intra_pool = routes.intra_pool;
  const std::vector<Box>& chunk_boxes = routes.chunk_boxes;
  const std::vector<int>& member_fragments = routes.member_fragments;
  const std::vector<int>& node_of = facts.node_of_rank;
  const int num_holders = static_cast<int>(inter.holders.size());
  result.phases.route = clock.Lap();

  // Source selection. Deliveries with one candidate are assigned first (their load is fixed); the
  // others go largest first (LPT), each to the least-loaded candidate, preferring the leader's
  // rail when loads are close.
  {
    std::vector<int64_t> net_out(num_ranks, 0), intra_out(num_ranks, 0), node_out(num_nodes, 0);
    // Candidate c of a delivery: a piece holder, or past them a same-node holder.
    auto candidate = [&](int c) { return c < num_holders ? inter.holders[c] : intra_pool[c - num_holders]; };
    std::vector<int> device_of(num_ranks);
    for (int r = 0; r < num_ranks; ++r) device_of[r] = topology.ranks[r].local_device;
    // LPT order: bytes descending, then index (`flexible` is in index order and the sort stable).
    std::vector<int> flexible;
    flexible.reserve(deliveries.size());
    for (size_t i = 0; i < deliveries.size(); ++i) {
      Delivery& d = deliveries[i];
      if (d.cand_end - d.cand_begin > 1) {
        flexible.push_back(static_cast<int>(i));
        continue;
      }
      const bool intra = d.cand_begin >= num_holders;
      d.sender_frag = candidate(d.cand_begin);
      const int rank = src_rank[d.sender_frag];
      (intra ? intra_out : net_out)[rank] += d.bytes;
      if (!intra) node_out[node_of[rank]] += d.bytes;
    }
    std::stable_sort(flexible.begin(), flexible.end(),
                     [&](int a, int b) { return deliveries[a].bytes > deliveries[b].bytes; });
    // Per candidate number: its rank, that rank's local device and node, read in order by the
    // scans below (each delivery scans all its candidates; Kimi-K2's attention has 64 holders a
    // piece).
    struct Candidate {
      int rank, device, node;
    };
    std::vector<Candidate> cands(static_cast<size_t>(num_holders) + intra_pool.size());
    for (size_t c = 0; c < cands.size(); ++c) {
      const int rank = src_rank[candidate(static_cast<int>(c))];
      cands[c] = {rank, device_of[rank], node_of[rank]};
    }
    for (int di : flexible) {
      Delivery& d = deliveries[di];
      const Candidate* first = cands.data() + d.cand_begin;
      const Candidate* last = cands.data() + d.cand_end;
      const Candidate* best = first;
      if (d.cand_begin >= num_holders) {
        // Within the receiver's node: the least intra-node load.
        int64_t best_load = intra_out[best->rank];
        for (const Candidate* c = first + 1; c < last; ++c) {
          if (intra_out[c->rank] < best_load) {
            best = c;
            best_load = intra_out[c->rank];
          }
        }
        intra_out[best->rank] += d.bytes;
      } else {
        // Lower score wins, the score being the network load plus a penalty off the leader's
        // rail; on a tie, the lower node load.
        const int leader_device = device_of[trees.Rank(d.tree, 0)];
        const int64_t off_rail_penalty = d.bytes / 64 + 1;
        int64_t best_score =
            net_out[best->rank] + (best->device != leader_device ? off_rail_penalty : 0);
        int64_t best_node_load = node_out[best->node];
        for (const Candidate* c = first + 1; c < last; ++c) {
          const int64_t score =
              net_out[c->rank] + (c->device != leader_device ? off_rail_penalty : 0);
          if (score > best_score) continue;
          const int64_t node_load = node_out[c->node];
          if (score < best_score || node_load < best_node_load) {
            best = c;
            best_score = score;
            best_node_load = node_load;
          }
        }
        net_out[best->rank] += d.bytes;
        node_out[best->node] += d.bytes;
      }
      d.sender_frag = candidate(static_cast<int>(best - cands.data()));
    }
  }

  result.phases.select = clock.Lap();

  // Coalesce deliveries by (sender, tree) into messages of at most one chunk, in round order: each
  // sender visits destination nodes in rotated order, the distance (root node - sender node) mod
  // nodes. Order (sender, distance, tree, delivery index): a stable counting sort by sender, then,
  // within each sender's range (small, so it stays in cache), a stable counting sort by tree, the
  // trees taken by (distance, tree).
  std::vector<SortedDelivery> sorted;  // the deliveries in message order
  bool member_cuts = false;            // whether any of them is a member cut
  std::vector<int> sender_begin(num_ranks + 1, 0);
  for (const Delivery& d : deliveries) ++sender_begin[src_rank[d.sender_frag] + 1];
  for (int r = 0; r < num_ranks; ++r) sender_begin[r + 1] += sender_begin[r];
  {
    std::vector<int> order;
    order.resize(deliveries.size());
    {
      std::vector<int> by_sender, tree_at;  // delivery index and its tree, by sender
      by_sender.resize(deliveries.size());
      tree_at.resize(deliveries.size());
      std::vector<int> fill(sender_begin.begin(), sender_begin.end() - 1);
      for (size_t i = 0; i < deliveries.size(); ++i) {
        const int k = fill[src_rank[deliveries[i].sender_frag]]++;
        by_sender[k] = static_cast<int>(i);
        tree_at[k] = deliveries[i].tree;
      }
      std::vector<int> tree_next(trees.NumTrees(), 0);  // per tree: count, then next position
      // The sender's trees by (distance, tree): the distance (root node - sender node) mod nodes
      // above the tree, so that messages come in round order.
      std::vector<int64_t> present;
      for (int sender = 0; sender < num_ranks; ++sender) {
        const int begin = sender_begin[sender], end = sender_begin[sender + 1];
        present.clear();
        for (int k = begin; k < end; ++k) {
          const int tree = tree_at[k];
          if (tree_next[tree]++ == 0) {
            const int64_t distance =
                (node_of[trees.Rank(tree, 0)] - node_of[sender] + num_nodes) % num_nodes;
            present.push_back(distance << 32 | tree);
          }
        }
        std::sort(present.begin(), present.end());
        int position = begin;
        for (const int64_t key : present) {
          const int tree = static_cast<int>(key & 0xffffffff);
          const int count = tree_next[tree];
          tree_next[tree] = position;
          position += count;
        }
        for (int k = begin; k < end; ++k) order[tree_next[tree_at[k]]++] = by_sender[k];
        for (const int64_t key : present) tree_next[static_cast<int>(key & 0xffffffff)] = 0;
      }
    }
    // Deliveries in that order, with what emission reads of each (box, group, dtype): the passes
    // below read them sequentially. The lookups are independent from one delivery to the next, so
    // their cache misses overlap here, where emission would wait for each chain piece -> group ->
    // box in turn. The list is appended in order, so its memory is written once.
    sorted.reserve(deliveries.size());
    for (size_t k = 0; k < order.size(); ++k) {
      const Delivery& d = deliveries[order[k]];
      const Piece& piece = inter.pieces[d.piece];
      SortedDelivery& out = sorted.emplace_back();
      const FragmentGroup& group = inter.groups[piece.group];
      if (d.chunk >= 0) {
        out.box = &chunk_boxes[d.chunk];
      } else if (const Box* stored = inter.StoredBoxOf(piece)) {
        out.box = stored;
      } else {  // a member cut: its group's box, cut at the member
        out.box = group.box;
        out.member = static_cast<int16_t>(Intersection::MemberOf(piece));
        member_cuts = true;
      }
      out.group = &group;
      out.bytes = d.bytes;
      out.tree = d.tree;
      out.sender_frag = d.sender_frag;
      out.members = d.members;
      out.dtype = facts.piece_dtype[d.piece];
    }
  }
  std::vector<Delivery>().swap(deliveries);  // all read: its memory goes back before emission
  std::vector<Message> messages;
  messages.reserve(sorted.size());
  for (int s = 0; s < num_ranks; ++s) {
    const size_t sender_end = static_cast<size_t>(sender_begin[s + 1]);
    for (size_t i = static_cast<size_t>(sender_begin[s]); i < sender_end;) {
      const int tree = sorted[i].tree;
      const int size = trees.Size(tree);
      const int64_t cap = ChunkCap(options, size, node_of[trees.Rank(tree, 0)],
                                   node_of[trees.Rank(tree, size - 1)]);
      Message m;
      m.sender = s;
      m.tree = tree;
      m.first = static_cast<int>(i);
      m.bytes = 0;
      size_t j = i;
      while (j < sender_end && sorted[j].tree == tree &&
             (j == i || m.bytes + sorted[j].bytes <= cap)) {
        m.bytes += sorted[j].bytes;
        ++j;
      }
      m.last = static_cast<int>(j);
      messages.push_back(m);
      i = j;
    }
  }

  result.phases.order = clock.Lap();

  const EmitInputs emit_inputs{inter,        facts,  src_frags,        dst_frags, trees,
                               local_copies, sorted, member_fragments, messages,  num_ranks};
  if (member_cuts) {
    EmitOps<true>(emit_inputs, plan);
  } else {
    EmitOps<false>(emit_inputs, plan);
  }
  result.phases.emit = clock.Lap();
  return result;
}

// PlanReshard on layouts whose stacks agree: folds what the layouts list member by member.
Result<PlanResult> PlanReshardWithFold(const Layout& source, const Layout& destination,
                                       const Topology& topology, const PlannerOptions& options,
                                       PhaseClock& clock) {
  StackFold fold;
  const bool folded = FoldTensorStacks(source, destination, fold);
  const double fold_seconds = clock.Lap();
  if (folded) {
    Result<PlanResult> plan =
        PlanReshardOf(source, destination, &fold, topology, options, clock, fold_seconds);
    if (plan.ok()) {
      plan->stacks = fold.stacks;
      return plan;
    }
    // The stacks hide the original tensors: plan the layouts as given to report the error in
    // their terms.
  }
  return PlanReshardOf(source, destination, nullptr, topology, options, clock, fold_seconds);
}

Result<PlanResult> PlanGatherBroadcastOf(const Layout& source, const Layout& destination,
                                         const Topology& topology, const PlannerOptions& options) {
  if (options.bucket_bytes < 1) return InvalidArgument("bucket size must be positive");
  if (options.broadcast_chunk_bytes < 1) {
    return InvalidArgument("broadcast chunk size must be positive");
  }
  PlanResult result;
  TransferPlan& plan = result.plan;
  plan.source_buffers = source.buffers;
  plan.destination_buffers = destination.buffers;
  const int num_ranks = NumRanksOf(plan.source_buffers, plan.destination_buffers);
  FERRY_RETURN_IF_ERROR(CheckTopology(topology, num_ranks));
  if (source.fragments.empty()) return InvalidArgument("the source layout has no fragments");
  int root = num_ranks;
  for (const BufferSpec& b : source.buffers) root = std::min(root, b.rank);

  // The root's view: every destination tensor whole, row-major, concatenated in tensor order.
  Layout whole;
  std::vector<int64_t> tensor_offset;  // byte offset in the concatenation
  for (const TensorSpec& t : destination.tensors) {
    FERRY_ASSIGN_OR_RETURN(int ti, whole.AddTensor(t));
    tensor_offset.push_back(whole.buffers.empty() ? 0 : whole.buffers[0].bytes);
    whole.AppendFragment(ti, Box::FromShape(t.shape), root, "gather");
  }
  FERRY_ASSIGN_OR_RETURN(Intersection inter, IntersectLayouts(source, whole));
  // Also checks that every destination tensor exists in the source with the same shape/dtype.
  FERRY_ASSIGN_OR_RETURN(Intersection direct, IntersectLayouts(source, destination));

  // Buckets: consecutive tensors up to bucket_bytes (a larger tensor gets its own bucket).
  const int num_tensors = static_cast<int>(destination.tensors.size());
  std::vector<int> bucket_of(num_tensors);
  std::vector<int64_t> bucket_start, bucket_bytes;
  for (int t = 0; t < num_tensors; ++t) {
    const int64_t bytes = destination.tensors[t].NumBytes();
    if (bucket_bytes.empty() || bucket_bytes.back() + bytes > options.bucket_bytes) {
      bucket_start.push_back(tensor_offset[t]);
      bucket_bytes.push_back(0);
    }
    bucket_of[t] = static_cast<int>(bucket_bytes.size()) - 1;
    bucket_bytes.back() += bytes;
  }
  const int num_buckets = static_cast<int>(bucket_bytes.size());

  plan.strategy = "gather-broadcast";
  plan.num_ranks = num_ranks;
  std::vector<int> root_slot(num_buckets);
  for (int b = 0; b < num_buckets; ++b) root_slot[b] = plan.AddSlot(root, bucket_bytes[b]);

  // Region of `box` of tensor t inside bucket slot `slot` (row-major whole tensor).
  auto bucket_region = [&](int t, int slot, const Box& box) {
    const TensorSpec& spec = destination.tensors[t];
    Fragment f;
    f.tensor = t;
    f.box = Box::FromShape(spec.shape);
    f.loc.rank = root;
    f.loc.buffer = slot;
    f.loc.byte_offset = tensor_offset[t] - bucket_start[bucket_of[t]];
    f.loc.strides = RowMajorStrides(spec.shape);
    return FragmentRegion(destination, f, Space::kStaging, box);
  };

  // Gather: each piece from its least-loaded holder (the root itself when it holds it).
  struct GatherItem {
    int bucket, holder_rank, piece, frag;
  };
  std::vector<GatherItem> items;
  std::vector<int64_t> load(num_ranks, 0);
  for (size_t p = 0; p < inter.pieces.size(); ++p) {
    const Piece& piece = inter.pieces[p];
    const int t = inter.groups[piece.group].dst_tensor;
    int best = -1;
    for (int h = piece.holders_begin; h < piece.holders_end; ++h) {
      const int f = inter.holders[h];
      const int r = source.fragments.Rank(f);
      if (r == root) {
        best = f;
        break;
      }
      if (best < 0 || load[r] < load[source.fragments.Rank(best)]) best = f;
    }
    const int r = source.fragments.Rank(best);
    load[r] += inter.VolumeOf(piece) * DTypeSize(destination.tensors[t].dtype);
    items.push_back({bucket_of[t], r, static_cast<int>(p), best});
  }
  std::stable_sort(items.begin(), items.end(), [](const GatherItem& a, const GatherItem& b) {
    if (a.bucket != b.bucket) return a.bucket < b.bucket;
    return a.holder_rank < b.holder_rank;
  });
  std::vector<std::vector<int>> bucket_ready(num_buckets);  // root ops a bucket's broadcast waits for
  // A holder sends its pieces bucket after bucket (each send waits for its previous one, and the
  // root's receive from it likewise), so buckets fill in order instead of all sharing the root's
  // ingress until the end.
  std::vector<int> last_send(num_ranks, -1), last_recv(num_ranks, -1);
  int next_message = 0;
  for (size_t i = 0; i < items.size();) {
    const int bucket = items[i].bucket, holder = items[i].holder_rank;
    size_t j = i;
    while (j < items.size() && items[j].bucket == bucket && items[j].holder_rank == holder) ++j;
    std::vector<CopyPair> to_bucket;
    std::vector<CopyPair> packs;
    int64_t bytes = 0;
    int slot = -1, remote_slot = -1;
    if (holder != root) {
      for (size_t k = i; k < j; ++k) {
        const Piece& piece = inter.pieces[items[k].piece];
        bytes += inter.VolumeOf(piece) *
                 DTypeSize(destination.tensors[inter.groups[piece.group].dst_tensor].dtype);
      }
      slot = plan.AddSlot(holder, bytes);
      remote_slot = plan.AddSlot(root, bytes);
    }
    int64_t offset = 0;
    for (size_t k = i; k < j; ++k) {
      const Piece& piece = inter.pieces[items[k].piece];
      const int t = inter.groups[piece.group].dst_tensor;
      const Box box = inter.BoxOf(piece);
      const Region src =
          FragmentRegion(source, source.fragments[items[k].frag], Space::kSource, box);
      const Region dst = bucket_region(t, root_slot[bucket], box);
      if (holder == root) {
        to_bucket.push_back({src, dst});
      } else {
        const DType dt = destination.tensors[t].dtype;
        packs.push_back({src, SlotRegion(slot, offset, dt, box)});
        to_bucket.push_back({SlotRegion(remote_slot, offset, dt, box), dst});
        offset += box.Volume() * DTypeSize(dt);
      }
    }
    if (holder == root) {
      Op copy;
      copy.kind = OpKind::kCopy;
      copy.rank = root;
      copy.round = bucket;
      for (const CopyPair& c : to_bucket) copy.bytes += c.to.NumBytes();
      bucket_ready[bucket].push_back(plan.AddOp(std::move(copy), {}, to_bucket));
    } else {
      Op pack;
      pack.kind = OpKind::kPack;
      pack.rank = holder;
      pack.bytes = bytes;
      pack.round = bucket;
      const int pack_id = plan.AddOp(std::move(pack), {}, packs);
      Op send;
      send.kind = OpKind::kSend;
      send.rank = holder;
      send.peer = root;
      send.bytes = bytes;
      send.round = bucket;
      send.link = topology.Link(holder, root);
      send.message = next_message++;
      send.data = {Space::kStaging, slot, 0};
      std::vector<int> send_deps = {pack_id};
      if (last_send[holder] >= 0) send_deps.push_back(last_send[holder]);
      Op recv = send;
      recv.kind = OpKind::kRecv;
      recv.rank = root;
      recv.peer = holder;
      std::vector<int> recv_deps;
      if (last_recv[holder] >= 0) recv_deps.push_back(last_recv[holder]);
      recv.data = {Space::kStaging, remote_slot, 0};
      last_send[holder] = plan.AddOp(std::move(send), send_deps);
      const int recv_id = plan.AddOp(std::move(recv), recv_deps);
      last_recv[holder] = recv_id;
      Op unpack;
      unpack.kind = OpKind::kUnpack;
      unpack.rank = root;
      unpack.bytes = bytes;
      unpack.round = bucket;
      bucket_ready[bucket].push_back(plan.AddOp(std::move(unpack), {recv_id}, to_bucket));
    }
    i = j;
  }

  // Broadcast, pipelined as NCCL does across nodes: each bucket is cut into chunks of
  // broadcast_chunk_bytes; chunk c travels on channel k = c mod (GPUs a node): the root sends it to
  // the channel's leader on the first destination node (local GPU k, so consecutive chunks use
  // different rails), each leader forwards it to the next node's leader (same rail) and down a chain
  // through the other destination GPUs of its node, starting after itself. Every hop is a Forward
  // of one chunk, so chunks flow down the chains concurrently.
  std::vector<int> dst_ranks = destination.Ranks();
  const bool root_is_destination = std::binary_search(dst_ranks.begin(), dst_ranks.end(), root);
  std::vector<std::vector<int>> node_members;  // destination ranks other than the root, per node
  {
    std::vector<int> order = dst_ranks;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const RankPlacement& pa = topology.ranks[a];
      const RankPlacement& pb = topology.ranks[b];
      if (pa.node != pb.node) return pa.node < pb.node;
      return pa.local_device < pb.local_device;
    });
    int last_node = -1;
    for (int rank : order) {
      if (rank == root) continue;
      if (topology.ranks[rank].node != last_node) node_members.emplace_back();
      last_node = topology.ranks[rank].node;
      node_members.back().push_back(rank);
    }
  }
  const int64_t chunk_bytes = options.broadcast_chunk_bytes;
  std::vector<int> frag_order(destination.fragments.size());
  std::iota(frag_order.begin(), frag_order.end(), 0);
  std::stable_sort(frag_order.begin(), frag_order.end(), [&](int a, int b) {
    const FragmentTable& fragments = destination.fragments;
    if (fragments.Rank(a) != fragments.Rank(b)) return fragments.Rank(a) < fragments.Rank(b);
    return bucket_of[fragments.Tensor(a)] < bucket_of[fragments.Tensor(b)];
  });
  // Adds the Unpack of `rank`'s fragments of `bucket` from staging slot `slot`, after `deps`,
  // unless the rank has none.
  std::vector<CopyPair> unpack_copies;
  auto add_unpack = [&](int rank, int bucket, int slot, const std::vector<int>& deps) {
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.rank = rank;
    unpack.round = bucket;
    unpack_copies.clear();
    auto lo = std::lower_bound(frag_order.begin(), frag_order.end(), std::make_pair(rank, bucket),
                               [&](int f, const std::pair<int, int>& key) {
                                 const FragmentTable& fragments = destination.fragments;
                                 return std::make_pair(fragments.Rank(f),
                                                       bucket_of[fragments.Tensor(f)]) < key;
                               });
    for (auto it = lo; it != frag_order.end(); ++it) {
      const FragmentTable& fragments = destination.fragments;
      if (fragments.Rank(*it) != rank || bucket_of[fragments.Tensor(*it)] != bucket) break;
      if (fragments.Volume(*it) == 0) continue;
      const Fragment f = fragments[*it];
      unpack_copies.push_back({bucket_region(f.tensor, slot, f.box),
                               FragmentRegion(destination, f, Space::kDestination, f.box)});
      unpack.bytes += unpack_copies.back().to.NumBytes();
    }
    if (!unpack_copies.empty()) plan.AddOp(std::move(unpack), deps, unpack_copies);
  };
  int64_t chunk_counter = 0;  // chunks of all buckets so far: picks the channel
  std::map<int, int> slot_of;            // rank -> its slot for the current bucket
  std::map<int, std::vector<int>> recvs;  // rank -> its Recv ops of the current bucket
  for (int b = 0; b < num_buckets; ++b) {
    if (root_is_destination) add_unpack(root, b, root_slot[b], bucket_ready[b]);
    slot_of.clear();
    recvs.clear();
    for (const std::vector<int>& members : node_members) {
      for (int rank : members) slot_of[rank] = plan.AddSlot(rank, bucket_bytes[b]);
    }
    const int64_t num_chunks = (bucket_bytes[b] + chunk_bytes - 1) / chunk_bytes;
    for (int64_t c = 0; c < num_chunks; ++c, ++chunk_counter) {
      const int64_t offset = c * chunk_bytes;
      const int64_t bytes = std::min(chunk_bytes, bucket_bytes[b] - offset);
      const int base_round = static_cast<int>(chunk_counter);
      // One hop of the chunk: `from` (the root, or a rank holding the chunk after Recv `from_recv`)
      // sends it to `to`; returns `to`'s Recv.
      auto hop = [&](int from, int from_recv, int to, int depth) {
        Op send;
        send.kind = from == root ? OpKind::kSend : OpKind::kForward;
        send.rank = from;
        send.peer = to;
        send.bytes = bytes;
        send.round = base_round + depth;
        send.link = topology.Link(from, to);
        send.message = next_message++;
        const int from_slot = from == root ? root_slot[b] : slot_of[from];
        send.data = {Space::kStaging, from_slot, offset};
        Op recv;
        recv.kind = OpKind::kRecv;
        recv.rank = to;
        recv.peer = from;
        recv.bytes = bytes;
        recv.round = send.round;
        recv.link = send.link;
        recv.message = send.message;
        recv.data = {Space::kStaging, slot_of[to], offset};
        if (from == root) {
          plan.AddOp(std::move(send), bucket_ready[b]);
        } else {
          plan.AddOp(std::move(send), {from_recv});
        }
        const int recv_id = plan.AddOp(std::move(recv));
        recvs[to].push_back(recv_id);
        return recv_id;
      };
      int prev_leader = root, prev_recv = -1, depth = 0;
      for (const std::vector<int>& members : node_members) {
        const int n = static_cast<int>(members.size());
        const int k = static_cast<int>(chunk_counter % n);
        const int leader = members[k];
        const int leader_recv = hop(prev_leader, prev_recv, leader, depth);
        int prev = leader, prev_local_recv = leader_recv;
        for (int i = 1; i < n; ++i) {
          const int rank = members[(k + i) % n];
          prev_local_recv = hop(prev, prev_local_recv, rank, depth + i);
          prev = rank;
        }
        prev_leader = leader;
        prev_recv = leader_recv;
        ++depth;
      }
    }
    for (const std::vector<int>& members : node_members) {
      for (int rank : members) add_unpack(rank, b, slot_of[rank], recvs[rank]);
    }
  }

  // The physical limit is the same whichever plan runs.
  result.demand = ComputeDemand(direct, PlanFacts(direct, DTypesOf(destination), topology),
                                std::max(1, topology.NumNodes()));
  return result;
}

// Calls `plan` with the layouts when their tensor stacks agree (core/layout/tensor_stack.h).
// Otherwise one of them lists the members of a stack the other has, and only the layout with
// fewer fragments is rewritten, where that suffices: its members of the other's stacks are stacked
// (StackMembers, merging runs of members at a constant stride), or else its own stacks are
// expanded into members (UnstackTensors, planned then with stack folding). Failing that, both are
// restacked, and as a last resort (other ranges of one family, a member of another shape) both
// are expanded into members, so planning reports any mismatch in their terms. Rewritten layouts
// live for the call only: a plan keeps no pointer into its layouts.
template <typename PlanFn>
Result<PlanResult> WithAgreeingStacks(const Layout& source, const Layout& destination,
                                      PlanFn plan) {
  if (TensorStacksAgree(source, destination)) return plan(source, destination);
  auto has_stacks = [](const Layout& layout) {
    return std::any_of(layout.tensors.begin(), layout.tensors.end(), [](const TensorSpec& t) {
      return ParseTensorStackName(t.name).has_value();
    });
  };
  // `layout` with its members of `other`'s stacks stacked; nullopt when it lists none of them or
  // they do not fit the stacks.
  auto restacked = [](const Layout& layout, const Layout& other) -> std::optional<Layout> {
    const std::vector<TensorSpec> missing = StacksMissingIn(layout, other);
    if (missing.empty()) return std::nullopt;
    int64_t members = 0;
    Result<Layout> out = StackMembers(layout, missing, &members);
    if (!out.ok() || members == 0) return std::nullopt;
    return std::move(*out);
  };
  const bool source_smaller = source.fragments.size() <= destination.fragments.size();
  const Layout& smaller = source_smaller ? source : destination;
  const Layout& larger = source_smaller ? destination : source;
  auto agree = [&](const Layout& small) {
    return source_smaller ? TensorStacksAgree(small, larger) : TensorStacksAgree(larger, small);
  };
  auto plan_with = [&](const Layout& small) {
    return source_smaller ? plan(small, larger) : plan(larger, small);
  };
  const std::optional<Layout> smaller_restacked = restacked(smaller, larger);
  if (smaller_restacked && agree(*smaller_restacked)) return plan_with(*smaller_restacked);
  if (has_stacks(smaller)) {
    Result<Layout> expanded = UnstackTensors(smaller);
    if (expanded.ok() && agree(*expanded)) return plan_with(*expanded);
  }
  {
    const std::optional<Layout> larger_restacked = restacked(larger, smaller);
    if (smaller_restacked || larger_restacked) {
      const Layout& small = smaller_restacked ? *smaller_restacked : smaller;
      const Layout& large = larger_restacked ? *larger_restacked : larger;
      const Layout& s = source_smaller ? small : large;
      const Layout& d = source_smaller ? large : small;
      if (TensorStacksAgree(s, d)) return plan(s, d);
    }
  }
  // A layout without stacks is its own expansion: only the others are copied.
  Layout source_members, destination_members;
  if (has_stacks(source)) {
    FERRY_ASSIGN_OR_RETURN(source_members, UnstackTensors(source).WithContext("source layout"));
  }
  if (has_stacks(destination)) {
    FERRY_ASSIGN_OR_RETURN(destination_members,
                           UnstackTensors(destination).WithContext("destination layout"));
  }
  return plan(has_stacks(source) ? source_members : source,
              has_stacks(destination) ? destination_members : destination);
}

}  // namespace

Result<PlanResult> PlanReshard(const Layout& source, const Layout& destination,
                               const Topology& topology, const PlannerOptions& options) {
  if (options.network_chunk_bytes < 64 || options.fanout_chunk_bytes < 64 ||
      options.relay_chunk_bytes < 64) {
    return InvalidArgument("chunk sizes must be at least 64 bytes");
  }
  PhaseClock clock;
  return WithAgreeingStacks(source, destination, [&](const Layout& s, const Layout& d) {
    return PlanReshardWithFold(s, d, topology, options, clock);
  });
}

Result<PlanResult> PlanGatherBroadcast(const Layout& source, const Layout& destination,
                                       const Topology& topology, const PlannerOptions& options) {
  return WithAgreeingStacks(source, destination, [&](const Layout& s, const Layout& d) {
    return PlanGatherBroadcastOf(s, d, topology, options);
  });
}

Result<PlanResult> MakePlan(Strategy strategy, const Layout& source, const Layout& destination,
                            const Topology& topology, const PlannerOptions& options) {
  if (strategy == Strategy::kReshard) return PlanReshard(source, destination, topology, options);
  return PlanGatherBroadcast(source, destination, topology, options);
}

}  // namespace ferry
