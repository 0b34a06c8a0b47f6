// A frozen copy of planner/intersect.cc as of commit a1fba51 (before the speed-up), kept only in
// tests: intersect_test checks that the current IntersectLayouts returns exactly what this one does.
#include "tests/planner/intersect_reference.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ferry::reference {
namespace {

// Box's order and equality (lexicographic on ndim, lo, hi), inline: the fragment sorts and the
// grouping compare millions of boxes.
int CompareBoxes(const Box& a, const Box& b) {
  if (a.ndim != b.ndim) return a.ndim < b.ndim ? -1 : 1;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.lo[d] != b.lo[d]) return a.lo[d] < b.lo[d] ? -1 : 1;
  }
  for (int d = 0; d < a.ndim; ++d) {
    if (a.hi[d] != b.hi[d]) return a.hi[d] < b.hi[d] ? -1 : 1;
  }
  return 0;
}

bool SameBox(const Box& a, const Box& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.lo[d] != b.lo[d] || a.hi[d] != b.hi[d]) return false;
  }
  return true;
}

Status CheckBox(const Layout& layout, const Fragment& f, int index, const char* side) {
  const TensorSpec& t = layout.tensors[f.tensor];
  bool ok = f.box.ndim == static_cast<int>(t.shape.size());
  for (int d = 0; ok && d < f.box.ndim; ++d) {
    ok = f.box.lo[d] >= 0 && f.box.lo[d] <= f.box.hi[d] && f.box.hi[d] <= t.shape[d];
  }
  if (!ok) {
    return InvalidArgument(std::string(side) + " fragment " + std::to_string(index) + " of '" +
                           t.name + "' on rank " + std::to_string(f.loc.rank) + ": box " +
                           f.box.ToString() + " is outside the tensor's shape " +
                           Box::FromShape(t.shape).ToString());
  }
  return Status::Ok();
}

// Subtracts `cut` (inside `r`) from `r`, appending the up to 2*ndim remaining boxes to `out`.
void Subtract(Box r, const Box& cut, std::vector<Box>& out) {
  for (int d = 0; d < r.ndim; ++d) {
    if (r.lo[d] < cut.lo[d]) {
      Box below = r;
      below.hi[d] = cut.lo[d];
      out.push_back(below);
      r.lo[d] = cut.lo[d];
    }
    if (cut.hi[d] < r.hi[d]) {
      Box above = r;
      above.lo[d] = cut.hi[d];
      out.push_back(above);
      r.hi[d] = cut.hi[d];
    }
  }
}

struct UniqueBox {
  Box box;
  int holders_begin = 0;
  int holders_end = 0;
};

// Interval index over the unique source boxes of one tensor, along one dimension.
class SweepIndex {
 public:
  void Build(const std::vector<UniqueBox>& boxes, int dim) {
    dim_ = dim;
    order_.resize(boxes.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(), [&](int a, int b) {
      if (boxes[a].box.lo[dim] != boxes[b].box.lo[dim]) return boxes[a].box.lo[dim] < boxes[b].box.lo[dim];
      return a < b;
    });
    lo_.resize(boxes.size());
    max_hi_.resize(boxes.size());
    int64_t running = INT64_MIN;
    for (size_t i = 0; i < order_.size(); ++i) {
      lo_[i] = boxes[order_[i]].box.lo[dim];
      running = std::max(running, boxes[order_[i]].box.hi[dim]);
      max_hi_[i] = running;
    }
  }
  // Appends ids of boxes intersecting `q` (unsorted).
  void Query(const std::vector<UniqueBox>& boxes, const Box& q, std::vector<int>& out) const {
    size_t end = std::lower_bound(lo_.begin(), lo_.end(), q.hi[dim_]) - lo_.begin();
    size_t begin = std::upper_bound(max_hi_.begin(), max_hi_.end(), q.lo[dim_]) - max_hi_.begin();
    for (size_t i = begin; i < end; ++i) {
      if (boxes[order_[i]].box.Intersects(q)) out.push_back(order_[i]);
    }
  }

 private:
  int dim_ = 0;
  std::vector<int> order_;
  std::vector<int64_t> lo_;
  std::vector<int64_t> max_hi_;
};

// Distinct lo values along `dim` among `boxes`.
template <typename GetBox>
int DistinctLo(int count, GetBox get, int dim, std::vector<int64_t>& scratch) {
  scratch.clear();
  for (int i = 0; i < count; ++i) scratch.push_back(get(i).lo[dim]);
  std::sort(scratch.begin(), scratch.end());
  return static_cast<int>(std::unique(scratch.begin(), scratch.end()) - scratch.begin());
}

void AddPiece(Intersection& out, int group, const Box& box, int holders_begin, int holders_end) {
  Piece p;
  p.group = group;
  if (!SameBox(box, *out.groups[group].box)) {
    p.box = static_cast<int>(out.piece_boxes.size());
    out.piece_boxes.push_back(box);
  }
  p.holders_begin = holders_begin;
  p.holders_end = holders_end;
  out.pieces.push_back(p);
}

}  // namespace

Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination) {
  Intersection out;
  const int num_src_tensors = static_cast<int>(source.tensors.size());
  const int num_dst_tensors = static_cast<int>(destination.tensors.size());

  // Destination tensor -> source tensor, by name (a hash index: lookups only, never iterated,
  // so the result does not depend on hashing; a repeated name maps to its first tensor).
  std::unordered_map<std::string_view, int> by_name;
  by_name.reserve(num_src_tensors);
  for (int t = 0; t < num_src_tensors; ++t) by_name.emplace(source.tensors[t].name, t);
  std::vector<int> src_of_dst(num_dst_tensors, -1);
  for (int t = 0; t < num_dst_tensors; ++t) {
    const TensorSpec& d = destination.tensors[t];
    auto it = by_name.find(d.name);
    if (it == by_name.end()) {
      return InvalidArgument("destination tensor '" + d.name + "' does not exist in the source");
    }
    const TensorSpec& s = source.tensors[it->second];
    if (s.shape != d.shape || s.dtype != d.dtype) {
      return InvalidArgument("tensor '" + d.name + "' is " + Box::FromShape(s.shape).ToString() +
                             " " + std::string(DTypeName(s.dtype)) + " in the source but " +
                             Box::FromShape(d.shape).ToString() + " " +
                             std::string(DTypeName(d.dtype)) + " in the destination");
    }
    src_of_dst[t] = it->second;
  }

  // Source fragments sorted by (tensor, box, rank, id); destination likewise.
  // A counting sort by tensor (already in id order), then a sort of each tensor's few fragments
  // by (box, rank, id): whole-Box comparisons only within one tensor.
  auto sorted_fragments = [](const Layout& layout) {
    const size_t num_tensors = layout.tensors.size();
    std::vector<int> begin(num_tensors + 1, 0);
    for (const Fragment& f : layout.fragments) ++begin[f.tensor + 1];
    for (size_t t = 0; t < num_tensors; ++t) begin[t + 1] += begin[t];
    std::vector<int> order(layout.fragments.size());
    std::vector<int> next(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < layout.fragments.size(); ++i) {
      order[next[layout.fragments[i].tensor]++] = static_cast<int>(i);
    }
    auto less = [&](int a, int b) {
      const Fragment& fa = layout.fragments[a];
      const Fragment& fb = layout.fragments[b];
      if (const int c = CompareBoxes(fa.box, fb.box); c != 0) return c < 0;
      if (fa.loc.rank != fb.loc.rank) return fa.loc.rank < fb.loc.rank;
      return a < b;
    };
    for (size_t t = 0; t < num_tensors; ++t) {
      auto first = order.begin() + begin[t], last = order.begin() + begin[t + 1];
      if (!std::is_sorted(first, last, less)) std::sort(first, last, less);
    }
    return order;
  };
  for (size_t i = 0; i < source.fragments.size(); ++i) {
    FERRY_RETURN_IF_ERROR(CheckBox(source, source.fragments[i], static_cast<int>(i), "source"));
  }
  for (size_t i = 0; i < destination.fragments.size(); ++i) {
    FERRY_RETURN_IF_ERROR(
        CheckBox(destination, destination.fragments[i], static_cast<int>(i), "destination"));
  }
  const std::vector<int> src_order = sorted_fragments(source);
  const std::vector<int> dst_order = sorted_fragments(destination);
  std::vector<int> src_tensor_begin(num_src_tensors + 1, 0);
  for (const Fragment& f : source.fragments) ++src_tensor_begin[f.tensor + 1];
  for (int t = 0; t < num_src_tensors; ++t) src_tensor_begin[t + 1] += src_tensor_begin[t];

  // Groups.
  out.group_frags.reserve(dst_order.size());
  out.groups.reserve(dst_order.size());
  out.group_boxes.reserve(dst_order.size());  // boxes never move: groups point at them
  for (size_t i = 0; i < dst_order.size();) {
    const Fragment f = destination.fragments[dst_order[i]];
    size_t j = i;
    FragmentGroup g;
    g.dst_tensor = f.tensor;
    g.src_tensor = src_of_dst[f.tensor];
    g.frags_begin = static_cast<int>(out.group_frags.size());
    while (j < dst_order.size() && destination.fragments[dst_order[j]].tensor == f.tensor &&
           SameBox(destination.fragments[dst_order[j]].box, f.box)) {
      out.group_frags.push_back(dst_order[j]);
      ++j;
    }
    g.frags_end = static_cast<int>(out.group_frags.size());
    if (!f.box.Empty()) {
      out.group_boxes.push_back(f.box);
      g.box = &out.group_boxes.back();
      out.groups.push_back(g);
    }
    i = j;
  }
  out.pieces.reserve(out.groups.size());

  // Per destination tensor: index the unique source boxes, cut each group into pieces.
  std::vector<UniqueBox> unique;
  std::vector<int> candidates;
  std::vector<int64_t> scratch;
  std::vector<Box> remaining, next_remaining;
  std::vector<int> merged_holders;
  SweepIndex index;
  for (size_t gi = 0; gi < out.groups.size();) {
    const int dst_tensor = out.groups[gi].dst_tensor;
    size_t gend = gi;
    while (gend < out.groups.size() && out.groups[gend].dst_tensor == dst_tensor) ++gend;
    const int st = out.groups[gi].src_tensor;
    const TensorSpec& spec = destination.tensors[dst_tensor];

    unique.clear();
    for (int i = src_tensor_begin[st]; i < src_tensor_begin[st + 1];) {
      const Fragment& f = source.fragments[src_order[i]];
      int j = i;
      UniqueBox u;
      u.box = f.box;
      u.holders_begin = static_cast<int>(out.holders.size());
      while (j < src_tensor_begin[st + 1] && SameBox(source.fragments[src_order[j]].box, f.box)) {
        out.holders.push_back(src_order[j]);
        ++j;
      }
      u.holders_end = static_cast<int>(out.holders.size());
      if (!f.box.Empty()) unique.push_back(u);
      i = j;
    }
    const int num_unique = static_cast<int>(unique.size());
    const int num_groups = static_cast<int>(gend - gi);
    if (num_unique == 1 && unique[0].box == Box::FromShape(spec.shape)) {
      // The source holds the tensor whole (replicas of it): each group is one piece.
      for (size_t g = gi; g < gend; ++g) {
        Piece p;
        p.group = static_cast<int>(g);
        p.holders_begin = unique[0].holders_begin;
        p.holders_end = unique[0].holders_end;
        out.pieces.push_back(p);
      }
      gi = gend;
      continue;
    }
    const bool brute = static_cast<int64_t>(num_unique) * num_groups <= 256;
    if (!brute) {
      // Sweep along the dimension that separates both sides best.
      int best_dim = 0;
      int best_min = -1, best_sum = -1;
      for (int d = 0; d < static_cast<int>(spec.shape.size()); ++d) {
        int ks = DistinctLo(num_unique, [&](int i) -> const Box& { return unique[i].box; }, d,
                            scratch);
        int kd = DistinctLo(num_groups, [&](int i) -> const Box& { return *out.groups[gi + i].box; },
                            d, scratch);
        int mn = std::min(ks, kd), sum = ks + kd;
        if (mn > best_min || (mn == best_min && sum > best_sum)) {
          best_min = mn;
          best_sum = sum;
          best_dim = d;
        }
      }
      index.Build(unique, best_dim);
    }
    auto query = [&](const Box& q) {
      candidates.clear();
      if (brute) {
        for (int u = 0; u < num_unique; ++u) {
          if (unique[u].box.Intersects(q)) candidates.push_back(u);
        }
      } else {
        index.Query(unique, q, candidates);
        std::sort(candidates.begin(), candidates.end());
      }
    };
    // Are the unique source boxes pairwise disjoint (one sharding, any number of replicas)?
    bool disjoint = true;
    {
      int64_t volume = 0;
      for (const UniqueBox& u : unique) volume += u.box.Volume();
      if (volume > spec.NumElements()) disjoint = false;
      for (int u = 0; disjoint && u < num_unique && num_unique > 1; ++u) {
        query(unique[u].box);
        disjoint = candidates.size() == 1;
      }
    }
    for (size_t g = gi; g < gend; ++g) {
      const Box& q = *out.groups[g].box;
      query(q);
      if (disjoint) {
        int64_t covered = 0;
        for (int u : candidates) {
          const Box box = q.Intersect(unique[u].box);
          covered += box.Volume();
          AddPiece(out, static_cast<int>(g), box, unique[u].holders_begin, unique[u].holders_end);
        }
        if (covered != q.Volume()) {
          return InvalidArgument("tensor '" + spec.name + "': destination region " + q.ToString() +
                                 " on rank " +
                                 std::to_string(destination.fragments[out.group_frags[out.groups[g].frags_begin]].loc.rank) +
                                 " is not fully covered by source fragments");
        }
        continue;
      }
      // General case: source boxes overlap each other. Carve the group box greedily.
      remaining.assign(1, q);
      for (int u : candidates) {
        next_remaining.clear();
        for (const Box& r : remaining) {
          Box x = r.Intersect(unique[u].box);
          if (x.Empty()) {
            next_remaining.push_back(r);
            continue;
          }
          merged_holders.clear();
          for (int v : candidates) {
            if (unique[v].box.Contains(x)) {
              merged_holders.insert(merged_holders.end(), out.holders.begin() + unique[v].holders_begin,
                                    out.holders.begin() + unique[v].holders_end);
            }
          }
          std::sort(merged_holders.begin(), merged_holders.end(), [&](int a, int b) {
            const int ra = source.fragments[a].loc.rank, rb = source.fragments[b].loc.rank;
            return ra != rb ? ra < rb : a < b;
          });
          const int holders_begin = static_cast<int>(out.holders.size());
          out.holders.insert(out.holders.end(), merged_holders.begin(), merged_holders.end());
          AddPiece(out, static_cast<int>(g), x, holders_begin, static_cast<int>(out.holders.size()));
          Subtract(r, x, next_remaining);
        }
        remaining.swap(next_remaining);
        if (remaining.empty()) break;
      }
      if (!remaining.empty()) {
        return InvalidArgument("tensor '" + spec.name + "': destination region " +
                               remaining.front().ToString() + " is not covered by any source fragment");
      }
    }
    gi = gend;
  }
  return out;
}

}  // namespace ferry::reference
