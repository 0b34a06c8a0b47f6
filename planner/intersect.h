// Intersection of source and destination fragments, per logical tensor.
//
// Destination fragments with the same (tensor, box) form a *group* (replicas of one shard on several
// ranks). Each group's box is cut into disjoint *pieces*; every piece lies inside the box of each of
// its *holders* (source fragments that can supply it). Replicas with equal boxes share one holder
// list. Cost: sorting plus, per tensor, a sweep along the dimension that separates fragments best
// (an interval index: boxes sorted by lo with a running max of hi), so work grows with
// fragments + overlaps, never with all pairs. A tensor the source holds one whole index of dim 0
// per box (a tensor stack with a buffer per member) is cut at those indexes directly.
//
// Errors: a destination tensor missing in the source, shape or dtype mismatch, a fragment box
// outside its tensor, a destination element that no source fragment covers. Deterministic.
// Not thread-safe per object; IntersectLayouts may run on several threads at once (its scratch,
// about 36 bytes per fragment, is its own and freed on return).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "core/base/status.h"
#include "core/layout/box.h"
#include "core/layout/layout.h"

namespace ferry {

struct FragmentGroup {
  int dst_tensor = 0;    // index into destination.tensors
  int src_tensor = 0;    // index into source.tensors
  const Box* box = nullptr;  // its fragments' box: Intersection::group_boxes[its index]
  int frags_begin = 0;   // range in Intersection::group_frags (sorted by rank, then fragment)
  int frags_end = 0;
  int64_t volume = 0;    // elements in `box` (read without touching the destination layout)
};

struct Piece {
  int group = 0;
  int box = -1;            // inside the group's box: Intersection::piece_boxes[box] when >= 0;
                           // the group's box itself when -1 (most pieces); when <= -2, the group's
                           // box cut at one index m = -2 - box of dim 0 (a *member cut*: a slice
                           // of one member of a tensor stack that the source holds member by
                           // member), which needs no box of its own
  int holders_begin = 0;   // range in Intersection::holders (source fragment ids, by rank)
  int holders_end = 0;
};

// Boxes stored in blocks of 1,024 that never move: appending writes a box once, where a vector
// would copy all of them each time it regrows (Kimi-K2 with a buffer per expert has 1.1M piece
// boxes of 136 bytes). References stay valid until the list is destroyed. Not thread-safe.
class BoxList {
  static_assert(std::is_trivially_copyable_v<Box> && std::is_trivially_destructible_v<Box>);

 public:
  BoxList() = default;
  BoxList(BoxList&&) noexcept = default;
  BoxList& operator=(BoxList&&) noexcept = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Box& operator[](size_t i) const { return blocks_[i >> kShift].get()[i & kMask]; }
  void push_back(const Box& box) {
    if ((size_ & kMask) == 0) {
      blocks_.emplace_back(static_cast<Box*>(::operator new(kBlockBytes)));
    }
    new (blocks_.back().get() + (size_ & kMask)) Box(box);  // Box is trivially destructible
    ++size_;
  }

 private:
  static constexpr size_t kShift = 10, kMask = (size_t{1} << kShift) - 1;
  static constexpr size_t kBlockBytes = sizeof(Box) << kShift;
  struct Free {
    void operator()(Box* block) const { ::operator delete(block); }
  };
  std::vector<std::unique_ptr<Box, Free>> blocks_;  // each holds 1 << kShift boxes' storage
  size_t size_ = 0;
};

struct Intersection {
  Intersection() = default;
  Intersection(Intersection&&) noexcept = default;
  Intersection& operator=(Intersection&&) noexcept = default;
  Intersection(const Intersection&) = delete;  // the groups point into group_boxes
  Intersection& operator=(const Intersection&) = delete;

  std::vector<FragmentGroup> groups;  // sorted by (dst tensor, box)
  std::vector<int> group_frags;       // destination fragment ids
  std::vector<Piece> pieces;          // sorted by group; pieces of a group are disjoint
  std::vector<int> holders;           // source fragment ids
  // The groups' boxes, by group (FragmentGroup::box points at its own): reserved for one group per
  // destination fragment, so that they never move while groups are added.
  std::vector<Box> group_boxes;
  BoxList piece_boxes;                 // boxes of the pieces smaller than their group
  std::vector<int> source_ranks;       // rank of each source fragment, by fragment id
  std::vector<int> destination_ranks;  // rank of each destination fragment, by fragment id

  // The largest dim-0 index a member cut encodes (Piece::box); AddMemberPiece stores the box of a
  // cut past it. Small enough for emission's records to carry it in 16 bits.
  static constexpr int64_t kMaxMemberCut = 32767;

  // The dim-0 index of a member cut, or -1 when `p` is none.
  static int MemberOf(const Piece& p) { return p.box <= -2 ? -2 - p.box : -1; }
  // The box `p` covers, built for a member cut.
  Box BoxOf(const Piece& p) const {
    if (p.box >= 0) return piece_boxes[static_cast<size_t>(p.box)];
    Box box = *groups[p.group].box;
    if (p.box <= -2) CutAtMember(box, MemberOf(p));
    return box;
  }
  // Where `p`'s box is stored (its group's or piece_boxes), or null for a member cut.
  const Box* StoredBoxOf(const Piece& p) const {
    return p.box >= 0    ? &piece_boxes[static_cast<size_t>(p.box)]
           : p.box == -1 ? groups[p.group].box
                         : nullptr;
  }
  // Elements in `p`'s box, without building it.
  int64_t VolumeOf(const Piece& p) const {
    if (p.box >= 0) return piece_boxes[static_cast<size_t>(p.box)].Volume();
    const FragmentGroup& g = groups[p.group];
    return p.box == -1 ? g.volume : g.volume / g.box->Extent(0);
  }
  // `box` restricted to index `member` of dim 0 (which it contains).
  static void CutAtMember(Box& box, int64_t member) {
    box.lo[0] = member;
    box.hi[0] = member + 1;
  }
  // Appends a piece of group `group` with box `box` (inside the group's box).
  void AddPiece(int group, const Box& box, int holders_begin, int holders_end);
  // Appends the piece of group `group` at index `member` of dim 0 (inside the group's box): a
  // member cut, unless it is the whole group or past kMaxMemberCut (then as AddPiece).
  void AddMemberPiece(int group, int64_t member, int holders_begin, int holders_end);
};

// Takes fragments out of a layout as the intersection's fragment pass reads them (stack folding
// puts them into stacks instead: planner/fold_stacks.h). Not thread-safe.
class FragmentDiverter {
 public:
  virtual ~FragmentDiverter() = default;
  // Called once per fragment, in id order, before the pass validates it; true leaves fragment
  // `id` out of the intersection.
  virtual bool Divert(const FragmentTable& fragments, size_t id) = 0;
  // True when Divert will take every fragment of tensor `tensor`: the intersection then neither
  // maps it to the other layout's tensor nor checks their shapes (the diverter answers for that).
  // A fragment of such a tensor that Divert does not take fails the intersection.
  virtual bool TakesWholeTensor(int tensor) const {
    (void)tensor;
    return false;
  }
};

Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination);
// The same with the fragments the diverters take (either may be null) left out: they hold
// nothing, need nothing, and their ranks read -1. Fragment ids stay those of the layouts.
Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination,
                                      FragmentDiverter* source_diverter,
                                      FragmentDiverter* destination_diverter);

// Appends `more`, an intersection of two further layouts, to `into`: their fragments are numbered
// after `into`'s (ids offset by its source_ranks / destination_ranks sizes) and their tensors
// after the first layouts' (indexes offset by `src_tensor_offset` / `dst_tensor_offset`). `more` is
// consumed: its piece boxes (136 bytes each, 185k for Kimi-K2's stacks) are moved, not copied,
// when `into` has none.
void AppendIntersection(Intersection& into, Intersection&& more, int src_tensor_offset,
                        int dst_tensor_offset);

}  // namespace ferry
