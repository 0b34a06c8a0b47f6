// SplitOverlappingGroups: overlapping destination groups cut into disjoint cells.
#include "planner/distinct_pieces.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

namespace ferry {
namespace {

// Marks (in `overlaps`, by group) the groups of [gi, gend), one tensor's, whose boxes intersect
// another's: a sweep along the dim whose lower bounds differ most often.
bool MarkOverlaps(const Intersection& inter, size_t gi, size_t gend,
                  std::vector<char>& overlaps) {
  if (gend - gi < 2) return false;
  const int ndim = inter.groups[gi].box->ndim;
  int dim = 0;
  size_t most = 0;
  std::vector<int64_t> values;
  for (int d = 0; d < ndim; ++d) {
    values.clear();
    for (size_t g = gi; g < gend; ++g) values.push_back(inter.groups[g].box->lo[d]);
    std::sort(values.begin(), values.end());
    const size_t distinct = std::unique(values.begin(), values.end()) - values.begin();
    if (distinct > most) {
      most = distinct;
      dim = d;
    }
  }
  std::vector<size_t> order(gend - gi);
  std::iota(order.begin(), order.end(), gi);
  auto box = [&](size_t g) -> const Box& { return *inter.groups[g].box; };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return box(a).lo[dim] < box(b).lo[dim]; });
  bool any = false;
  std::vector<size_t> active;
  for (size_t g : order) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t a) { return box(a).hi[dim] <= box(g).lo[dim]; }),
                 active.end());
    for (size_t a : active) {
      if (box(a).Intersects(box(g))) overlaps[a] = overlaps[g] = any = true;
    }
    active.push_back(g);
  }
  return any;
}

// Appends the cells of `box` on the grid of `cuts` (per dim, sorted boundaries) to `out`.
void CutOnGrid(const Box& box, const std::vector<std::vector<int64_t>>& cuts,
               std::vector<Box>& out) {
  std::vector<std::vector<int64_t>> bounds(box.ndim);  // per dim: lo, inner cuts, hi
  for (int d = 0; d < box.ndim; ++d) {
    bounds[d].push_back(box.lo[d]);
    for (int64_t c : cuts[d]) {
      if (c > box.lo[d] && c < box.hi[d]) bounds[d].push_back(c);
    }
    bounds[d].push_back(box.hi[d]);
  }
  std::vector<size_t> at(box.ndim, 0);
  while (true) {
    Box cell = box;
    for (int d = 0; d < box.ndim; ++d) {
      cell.lo[d] = bounds[d][at[d]];
      cell.hi[d] = bounds[d][at[d] + 1];
    }
    out.push_back(cell);
    int d = box.ndim - 1;
    while (d >= 0 && ++at[d] + 1 == bounds[d].size()) at[d--] = 0;
    if (d < 0) return;
  }
}

// Builds the split intersection group by group.
class Splitter {
 public:
  Splitter(const Intersection& in, Intersection& out) : in_(in), out_(out) {}

  void Split(const std::vector<char>& overlaps) {
    for (size_t g = 0; g < in_.groups.size(); ++g) pieces_of_.emplace_back();
    for (size_t p = 0; p < in_.pieces.size(); ++p) {
      pieces_of_[in_.pieces[p].group].push_back(static_cast<int>(p));
    }
    for (size_t gi = 0; gi < in_.groups.size();) {
      size_t gend = gi;
      while (gend < in_.groups.size() && in_.groups[gend].dst_tensor == in_.groups[gi].dst_tensor) {
        ++gend;
      }
      bool cells_added = false;
      for (size_t g = gi; g < gend; ++g) {
        if (!overlaps[g]) {
          Keep(g);
        } else if (!cells_added) {
          AddCells(gi, gend, overlaps);
          cells_added = true;
        }
      }
      gi = gend;
    }
  }

  // Upper bound on the groups Split adds (for reserving group_boxes, which must not move).
  static size_t CountCells(const Intersection& in, const std::vector<char>& overlaps) {
    size_t count = 0;
    for (size_t g = 0; g < in.groups.size(); ++g) count += overlaps[g] ? 0 : 1;
    Intersection scratch;
    Splitter counter(in, scratch);
    for (size_t gi = 0; gi < in.groups.size();) {
      size_t gend = gi;
      while (gend < in.groups.size() && in.groups[gend].dst_tensor == in.groups[gi].dst_tensor) {
        ++gend;
      }
      count += counter.Cells(gi, gend, overlaps).size();
      gi = gend;
    }
    return count;
  }

 private:
  // Group g and its pieces as they were.
  void Keep(size_t g) {
    const FragmentGroup& group = in_.groups[g];
    const int index = AddGroup(group, *group.box);
    out_.group_frags.insert(out_.group_frags.end(), in_.group_frags.begin() + group.frags_begin,
                            in_.group_frags.begin() + group.frags_end);
    out_.groups[index].frags_end = static_cast<int>(out_.group_frags.size());
    for (int p : pieces_of_[g]) {
      const Piece& piece = in_.pieces[p];
      if (Intersection::MemberOf(piece) >= 0) {
        out_.AddMemberPiece(index, Intersection::MemberOf(piece), piece.holders_begin,
                            piece.holders_end);
      } else {
        out_.AddPiece(index, in_.BoxOf(piece), piece.holders_begin, piece.holders_end);
      }
    }
  }

  // The cells of the overlapping groups of [gi, gend), each with the groups containing it.
  std::map<Box, std::vector<size_t>> Cells(size_t gi, size_t gend,
                                           const std::vector<char>& overlaps) const {
    std::map<Box, std::vector<size_t>> cells;
    if (gi == gend) return cells;
    std::vector<std::vector<int64_t>> cuts(in_.groups[gi].box->ndim);
    for (size_t g = gi; g < gend; ++g) {
      if (!overlaps[g]) continue;
      const Box& box = *in_.groups[g].box;
      for (int d = 0; d < box.ndim; ++d) {
        cuts[d].push_back(box.lo[d]);
        cuts[d].push_back(box.hi[d]);
      }
    }
    for (std::vector<int64_t>& c : cuts) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
    }
    std::vector<Box> boxes;
    for (size_t g = gi; g < gend; ++g) {
      if (!overlaps[g]) continue;
      boxes.clear();
      CutOnGrid(*in_.groups[g].box, cuts, boxes);
      for (const Box& cell : boxes) cells[cell].push_back(g);
    }
    return cells;
  }

  // The cells of [gi, gend)'s overlapping groups as groups: the fragments of every group that
  // contains the cell, and the first such group's pieces cut to the cell.
  void AddCells(size_t gi, size_t gend, const std::vector<char>& overlaps) {
    std::vector<std::pair<int, int>> frags;  // (rank, fragment id)
    for (const auto& [cell, containing] : Cells(gi, gend, overlaps)) {
      const int index = AddGroup(in_.groups[containing.front()], cell);
      frags.clear();
      for (size_t g : containing) {
        const FragmentGroup& group = in_.groups[g];
        for (int i = group.frags_begin; i < group.frags_end; ++i) {
          const int f = in_.group_frags[i];
          frags.emplace_back(in_.destination_ranks[f], f);
        }
      }
      std::sort(frags.begin(), frags.end());
      for (const auto& [rank, f] : frags) out_.group_frags.push_back(f);
      out_.groups[index].frags_end = static_cast<int>(out_.group_frags.size());
      for (int p : pieces_of_[containing.front()]) {
        const Piece& piece = in_.pieces[p];
        const Box part = in_.BoxOf(piece).Intersect(cell);
        if (part.Volume() == 0) continue;
        out_.AddPiece(index, part, piece.holders_begin, piece.holders_end);
      }
    }
  }

  // Appends a group like `like` with box `box`, its fragments to follow; returns its index.
  int AddGroup(const FragmentGroup& like, const Box& box) {
    out_.group_boxes.push_back(box);
    FragmentGroup group;
    group.dst_tensor = like.dst_tensor;
    group.src_tensor = like.src_tensor;
    group.box = &out_.group_boxes.back();
    group.frags_begin = static_cast<int>(out_.group_frags.size());
    group.frags_end = group.frags_begin;
    group.volume = box.Volume();
    out_.groups.push_back(group);
    return static_cast<int>(out_.groups.size()) - 1;
  }

  const Intersection& in_;
  Intersection& out_;
  std::vector<std::vector<int>> pieces_of_;  // per group of `in_`, its pieces
};

}  // namespace

bool SplitOverlappingGroups(Intersection& inter) {
  std::vector<char> overlaps(inter.groups.size(), 0);
  bool any = false;
  for (size_t gi = 0; gi < inter.groups.size();) {
    size_t gend = gi;
    while (gend < inter.groups.size() &&
           inter.groups[gend].dst_tensor == inter.groups[gi].dst_tensor) {
      ++gend;
    }
    any = MarkOverlaps(inter, gi, gend, overlaps) || any;
    gi = gend;
  }
  if (!any) return false;
  Intersection out;
  out.group_boxes.reserve(Splitter::CountCells(inter, overlaps));
  out.holders = inter.holders;
  out.source_ranks = inter.source_ranks;
  out.destination_ranks = inter.destination_ranks;
  Splitter(inter, out).Split(overlaps);
  inter = std::move(out);
  return true;
}

}  // namespace ferry
