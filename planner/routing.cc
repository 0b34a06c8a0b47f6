// RouteDeliveries: local copies, intra-node deliveries, hierarchical and relayed network trees,
// and chunking.
#include "planner/routing.h"

#include <algorithm>
#include <array>

#include "planner/conversion.h"

namespace ferry {

int64_t ChunkCap(const PlannerOptions& options, int size, int first_node, int last_node,
                 int sender_node) {
  if (size == 1) {
    return sender_node == first_node ? options.same_node_chunk_bytes : options.network_chunk_bytes;
  }
  return first_node != last_node ? options.relay_chunk_bytes : options.fanout_chunk_bytes;
}

void ChunkBox(const Box& box, int64_t esize, int64_t cap, std::vector<Box>& out, int64_t row_align) {
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
  int64_t step = std::max<int64_t>(1, cap / slab[d]);
  if (d == box.ndim - 2 && row_align > 1 && step >= 2 * row_align) step -= step % row_align;
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


namespace {

// Routes the pieces one by one. Per piece: the destination ranks that need it (members), then per
// destination node the route in (local holders, or the network), then the trees.
class Router {
 public:
  Router(const Intersection& inter, const PlanFacts& facts, const PlannerOptions& options,
         bool relay, int num_ranks, int num_nodes, TreeTable& trees)
      : inter_(inter),
        facts_(facts),
        options_(options),
        relay_(relay),
        trees_(trees),
        holders_(inter, facts, num_ranks, num_nodes),
        num_holders_(static_cast<int>(inter.holders.size())),
        leader_load_(num_ranks, 0),
        rank_fragment_(num_ranks, kLookUp) {}

  Routes Route() {
    // About one delivery per destination fragment, and a member entry per fan-out member.
    routes_.deliveries.reserve(std::max(inter_.pieces.size(), inter_.group_frags.size()));
    routes_.member_fragments.reserve(inter_.group_frags.size());
    for (size_t p = 0; p < inter_.pieces.size(); ++p) {
      holders_.Mark(inter_.pieces[p]);
      CollectMembers(static_cast<int>(p));
      RouteIntoNodes(static_cast<int>(p));
      const int net_nodes = static_cast<int>(net_node_begin_.size()) - 1;
      if (net_nodes == 0) continue;
      if (relay_ && net_nodes > 1) {
        AddTree(static_cast<int>(p), static_cast<int>(p % net_nodes), net_nodes);
      } else {
        for (int n = 0; n < net_nodes; ++n) AddTree(static_cast<int>(p), n, 1);
      }
    }
    return std::move(routes_);
  }

 private:
  // Local copies of piece p for the ranks that hold it; member_ranks_, the other ranks that need
  // it, ordered by (node, rank), each with its fragment of the group in rank_fragment_.
  void CollectMembers(int p) {
    const FragmentGroup& g = inter_.groups[inter_.pieces[p].group];
    const std::vector<int>& node_of = facts_.node_of_rank;
    member_ranks_.clear();
    for (int i = g.frags_begin; i < g.frags_end; ++i) {
      const int frag = inter_.group_frags[i];
      const int rank = facts_.destination_rank[frag];
      if (holders_.HolderOn(rank) >= 0) {
        if (options_.same_rank == SameRankMode::kTransport) {
          RouteToSelf(p, rank, frag);
        } else {
          routes_.local_copies.push_back({rank, p, holders_.HolderOn(rank), frag});
        }
        continue;
      }
      if (member_ranks_.empty() || member_ranks_.back() != rank) {  // group_frags is by rank
        member_ranks_.push_back(rank);
        rank_fragment_[rank] = frag;
      } else {
        rank_fragment_[rank] = kLookUp;
      }
    }
    // Ranks numbered node by node are already in (node, rank) order.
    auto by_node = [&](int a, int b) { return node_of[a] < node_of[b]; };
    if (!std::is_sorted(member_ranks_.begin(), member_ranks_.end(), by_node)) {
      std::stable_sort(member_ranks_.begin(), member_ranks_.end(), by_node);
    }
  }

  // planner.same_rank=transport: piece p reaches fragment `frag` of `rank`, which holds the piece,
  // as a message from the rank to itself, its only candidate the rank's own holder.
  void RouteToSelf(int p, int rank, int frag) {
    const int cand_begin = num_holders_ + static_cast<int>(routes_.intra_pool.size());
    routes_.intra_pool.push_back(holders_.HolderOn(rank));
    Delivery d = NewDelivery(p, rank, cand_begin, cand_begin + 1);
    d.members = OneMember(frag);
    AddChunks(d, options_.network_chunk_bytes);
  }

  // Per destination node of the members: direct deliveries from holders on that node, or the
  // node's members as a network node in net_ranks_ (hierarchical: one chain from the
  // least-loaded member, cyclically by rank; else each member a network node of its own).
  void RouteIntoNodes(int p) {
    const Piece& piece = inter_.pieces[p];
    const std::vector<int>& node_of = facts_.node_of_rank;
    net_node_begin_.clear();
    net_ranks_.clear();
    for (size_t i = 0; i < member_ranks_.size();) {
      const int node = node_of[member_ranks_[i]];
      size_t j = i;
      while (j < member_ranks_.size() && node_of[member_ranks_[j]] == node) ++j;
      if (holders_.HeldOnNode(node)) {
        const int cand_begin = num_holders_ + static_cast<int>(routes_.intra_pool.size());
        for (int h = piece.holders_begin; h < piece.holders_end; ++h) {
          const int holder = inter_.holders[h];
          if (node_of[facts_.source_rank[holder]] == node) routes_.intra_pool.push_back(holder);
        }
        const int cand_end = num_holders_ + static_cast<int>(routes_.intra_pool.size());
        for (size_t k = i; k < j; ++k) {
          Delivery d = NewDelivery(p, member_ranks_[k], cand_begin, cand_end);
          d.members = OneMember(rank_fragment_[member_ranks_[k]]);
          AddChunks(d, options_.same_node_chunk_bytes);
        }
      } else if (options_.hierarchical) {
        size_t leader = i;
        for (size_t k = i + 1; k < j; ++k) {
          if (leader_load_[member_ranks_[k]] < leader_load_[member_ranks_[leader]]) leader = k;
        }
        leader_load_[member_ranks_[leader]] += facts_.piece_bytes[p];
        net_node_begin_.push_back(static_cast<int>(net_ranks_.size()));
        for (size_t k = leader; k < j; ++k) net_ranks_.push_back(member_ranks_[k]);
        for (size_t k = i; k < leader; ++k) net_ranks_.push_back(member_ranks_[k]);
      } else {
        for (size_t k = i; k < j; ++k) {
          net_node_begin_.push_back(static_cast<int>(net_ranks_.size()));
          net_ranks_.push_back(member_ranks_[k]);
        }
      }
      i = j;
    }
    net_node_begin_.push_back(static_cast<int>(net_ranks_.size()));
  }

  // Network deliveries of piece p to `count` network nodes from `first_node` on (cyclically): a
  // tree of one rank, or the nodes' chains with each node's leader fed by the previous one.
  void AddTree(int p, int first_node, int count) {
    const Piece& piece = inter_.pieces[p];
    const int net_nodes = static_cast<int>(net_node_begin_.size()) - 1;
    if (count == 1 && net_node_begin_[first_node + 1] - net_node_begin_[first_node] == 1) {
      const int rank = net_ranks_[net_node_begin_[first_node]];
      Delivery d = NewDelivery(p, rank, piece.holders_begin, piece.holders_end);
      d.members = OneMember(rank_fragment_[rank]);
      AddChunks(d, options_.network_chunk_bytes);
      return;
    }
    tree_ranks_.clear();
    tree_parent_.clear();
    int prev_leader = -1;
    for (int k = 0; k < count; ++k) {
      const int n = (first_node + k) % net_nodes;
      const int leader_pos = static_cast<int>(tree_ranks_.size());
      for (int r = net_node_begin_[n]; r < net_node_begin_[n + 1]; ++r) {
        const int previous = static_cast<int>(tree_ranks_.size()) - 1;
        tree_parent_.push_back(r == net_node_begin_[n] ? prev_leader : previous);
        tree_ranks_.push_back(net_ranks_[r]);
      }
      prev_leader = leader_pos;
    }
    Delivery d = NewDelivery(p, trees_.Intern(tree_ranks_, tree_parent_), piece.holders_begin,
                             piece.holders_end);
    d.members = static_cast<int>(routes_.member_fragments.size());
    for (int rank : tree_ranks_) routes_.member_fragments.push_back(rank_fragment_[rank]);
    const std::vector<int>& node_of = facts_.node_of_rank;
    AddChunks(d, ChunkCap(options_, static_cast<int>(tree_ranks_.size()),
                          node_of[tree_ranks_.front()], node_of[tree_ranks_.back()], -1));
  }

  static Delivery NewDelivery(int p, int tree, int cand_begin, int cand_end) {
    Delivery d;
    d.piece = p;
    d.tree = tree;
    d.cand_begin = cand_begin;
    d.cand_end = cand_end;
    return d;
  }

  // Delivery::members of a tree of one rank whose fragment is `frag` (or kLookUp).
  int OneMember(int frag) {
    if (frag != kLookUp) return ~frag;
    routes_.member_fragments.push_back(kLookUp);
    return static_cast<int>(routes_.member_fragments.size()) - 1;
  }

  // Adds `d` once per chunk of at most `cap` bytes of its piece (the piece whole when it fits).
  void AddChunks(Delivery d, int64_t cap) {
    const int p = d.piece;
    if (facts_.piece_bytes[p] <= cap) {
      d.chunk = -1;
      d.bytes = facts_.piece_bytes[p];
      routes_.deliveries.push_back(d);
      return;
    }
    const int64_t esize = DTypeSize(WireDType(facts_.piece_source_dtype[p], facts_.piece_dtype[p]));
    chunks_.clear();
    Box storage;
    ChunkBox(PieceBox(inter_, inter_.pieces[p], storage), esize, cap, chunks_, options_.chunk_row_align);
    for (const Box& c : chunks_) {
      d.chunk = static_cast<int>(routes_.chunk_boxes.size());
      routes_.chunk_boxes.push_back(c);
      d.bytes = c.Volume() * esize;
      routes_.deliveries.push_back(d);
    }
  }

  const Intersection& inter_;
  const PlanFacts& facts_;
  const PlannerOptions& options_;
  const bool relay_;
  TreeTable& trees_;
  HolderMarks holders_;
  const int num_holders_;
  std::vector<int64_t> leader_load_;  // bytes each rank receives from the network as a leader
  std::vector<int> rank_fragment_;    // per rank, piece-local: its one fragment, or kLookUp
  Routes routes_;
  // Scratch of the piece at hand.
  std::vector<int> member_ranks_;
  std::vector<int> net_node_begin_;  // per network node: its range of net_ranks_, plus the end
  std::vector<int> net_ranks_;       // per network node its ranks, leader first
  std::vector<int> tree_ranks_, tree_parent_;
  std::vector<Box> chunks_;
};

}  // namespace

Routes RouteDeliveries(const Intersection& inter, const PlanFacts& facts,
                       const PlannerOptions& options, bool relay, int num_ranks, int num_nodes,
                       TreeTable& trees) {
  return Router(inter, facts, options, relay, num_ranks, num_nodes, trees).Route();
}

}  // namespace ferry
