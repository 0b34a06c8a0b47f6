// What the reshard planner's passes read of the layouts and the intersection, computed once: the
// node of each rank, each piece's size and dtype, and per piece which ranks and nodes hold it
// (HolderMarks). Also the checks both planners make of their inputs. Internal to //planner.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "core/plan/plan.h"
#include "planner/intersect.h"

namespace ferry {

// The dtype of each of `layout`'s tensors, by index.
std::vector<DType> DTypesOf(const Layout& layout);

// One more than the highest rank owning a buffer of either table.
int NumRanksOf(const BufferTable& a, const BufferTable& b);

// An error unless `topology` places every rank below `num_ranks`.
Status CheckTopology(const Topology& topology, int num_ranks);

// The box of piece `p`: where it is stored, else (a member cut) built into `storage`.
inline const Box& PieceBox(const Intersection& inter, const Piece& p, Box& storage) {
  if (const Box* stored = inter.StoredBoxOf(p)) return *stored;
  storage = inter.BoxOf(p);
  return storage;
}

// Facts the passes read many times, in compact arrays (reading a rank out of a 96-byte fragment
// record each time would cost a cache miss each time).
struct PlanFacts {
  // The dtype vectors are by tensor index of the intersection's destination and source sides.
  PlanFacts(const Intersection& inter, const std::vector<DType>& dtype_of_destination_tensor,
            const std::vector<DType>& dtype_of_source_tensor, const Topology& topology);

  std::vector<int> node_of_rank;
  const std::vector<int>& source_rank;       // by source fragment (the intersection's)
  const std::vector<int>& destination_rank;  // by destination fragment
  // By piece of the intersection: its bytes as they travel (in WireDType, planner/conversion.h),
  // its destination tensor's dtype and its source tensor's (equal unless the planner converts).
  std::vector<int64_t> piece_bytes;
  std::vector<DType> piece_dtype;
  std::vector<DType> piece_source_dtype;
};

// The holders of the piece at hand: on which nodes they are, how many nodes, and a holder
// fragment per rank. Marks are kept while consecutive pieces share one holder range (the pieces
// of a tensor its source holds whole), so their holders are looked up once per range.
class HolderMarks {
 public:
  HolderMarks(const Intersection& inter, const PlanFacts& facts, int num_ranks, int num_nodes)
      : inter_(inter), facts_(facts), rank_holder_(num_ranks, -1), node_mark_(num_nodes, -1) {}
  // Marks `piece`'s holders, unless they are the range marked already.
  void Mark(const Piece& piece);
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

}  // namespace ferry
