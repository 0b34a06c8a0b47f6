// Intersection of source and destination fragments, per logical tensor.
//
// Destination fragments with the same (tensor, box) form a *group* (replicas of one shard on several
// ranks). Each group's box is cut into disjoint *pieces*; every piece lies inside the box of each of
// its *holders* (source fragments that can supply it). Replicas with equal boxes share one holder
// list. Cost: sorting plus, per tensor, a sweep along the dimension that separates fragments best
// (an interval index: boxes sorted by lo with a running max of hi), so work grows with
// fragments + overlaps, never with all pairs.
//
// Errors: a destination tensor missing in the source, shape or dtype mismatch, a destination
// element that no source fragment covers. Deterministic. Not thread-safe per object.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/layout/box.h"
#include "core/layout/layout.h"

namespace ferry {

struct FragmentGroup {
  int dst_tensor = 0;    // index into destination.tensors
  int src_tensor = 0;    // index into source.tensors
  Box box;
  int frags_begin = 0;   // range in Intersection::group_frags (sorted by rank, then fragment)
  int frags_end = 0;
};

struct Piece {
  int group = 0;
  Box box;                 // inside the group's box
  int holders_begin = 0;   // range in Intersection::holders (source fragment ids, by rank)
  int holders_end = 0;
};

struct Intersection {
  std::vector<FragmentGroup> groups;  // sorted by (dst tensor, box)
  std::vector<int> group_frags;       // destination fragment ids
  std::vector<Piece> pieces;          // sorted by group; pieces of a group are disjoint
  std::vector<int> holders;           // source fragment ids
};

Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination);

}  // namespace ferry
