// PlanFacts, HolderMarks and the input checks shared by both planners.
#include "planner/plan_facts.h"

#include <algorithm>
#include <string>

#include "planner/conversion.h"

namespace ferry {

std::vector<DType> DTypesOf(const Layout& layout) {
  std::vector<DType> dtypes;
  dtypes.reserve(layout.tensors.size());
  for (const TensorSpec& t : layout.tensors) dtypes.push_back(t.dtype);
  return dtypes;
}

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

PlanFacts::PlanFacts(const Intersection& inter,
                     const std::vector<DType>& dtype_of_destination_tensor,
                     const std::vector<DType>& dtype_of_source_tensor, const Topology& topology)
    : source_rank(inter.source_ranks), destination_rank(inter.destination_ranks) {
  node_of_rank.resize(topology.ranks.size());
  for (size_t r = 0; r < topology.ranks.size(); ++r) node_of_rank[r] = topology.ranks[r].node;
  piece_bytes.resize(inter.pieces.size());
  piece_dtype.resize(inter.pieces.size());
  piece_source_dtype.resize(inter.pieces.size());
  for (size_t p = 0; p < inter.pieces.size(); ++p) {
    const Piece& piece = inter.pieces[p];
    const FragmentGroup& group = inter.groups[piece.group];
    const DType dtype = dtype_of_destination_tensor[group.dst_tensor];
    const DType source_dtype = dtype_of_source_tensor[group.src_tensor];
    piece_dtype[p] = dtype;
    piece_source_dtype[p] = source_dtype;
    piece_bytes[p] = inter.VolumeOf(piece) * DTypeSize(WireDType(source_dtype, dtype));
  }
}

void HolderMarks::Mark(const Piece& piece) {
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

}  // namespace ferry
