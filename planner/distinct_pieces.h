// Distinct pieces: destination boxes of one tensor that overlap without being equal (two vLLM
// engines of different TP on one node, or layouts from files) form different groups of the
// intersection, whose pieces overlap; routed as they are, the bytes they share would cross the
// network into a node once per group, and the demand would count them once per group. This pass
// cuts such groups into cells whose boxes are equal or disjoint, each cell a group of its own
// with every destination fragment that contains it, so that routing sends each distinct byte a
// node needs into it once and fans it out to every rank that needs it (each unpacking the cell
// into its own fragment). Internal to //planner.
#pragma once

#include "planner/intersect.h"

namespace ferry {

// Replaces the groups of each destination tensor whose boxes overlap another group's box with
// cells: the boxes are cut along every boundary (lo and hi of each dim) of the overlapping boxes,
// a cell's fragments are those of every group containing it (sorted by rank, then id), and its
// pieces are the pieces of one such group cut to the cell, with their holders. Groups that
// overlap no other are kept as they are; returns false, changing nothing, when none overlaps.
bool SplitOverlappingGroups(Intersection& inter);

}  // namespace ferry
