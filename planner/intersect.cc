// Fragment intersection: groups, interval index per tensor, disjoint pieces with holders.
//
// A refit's layouts hold hundreds of thousands of fragments (a 96-byte FragmentTable record each),
// so each fragment is read exactly once, in index order: that pass validates it and writes a 16-byte sort
// key (the box packed in 64 bits, rank, id); a counting sort moves the keys by tensor, and
// sorting, grouping and the common "source holds the tensor whole" case then run on the keys only.
// Fragments are read again (by index) only for tensors whose boxes do not pack (more than 2 dims,
// or dims too wide), and for the tensors whose source is sharded (the interval sweep below).
// Tensor names are compared at equal indices first; hashing only when that fails or the source's
// names are not known to be distinct. Groups keep their boxes (Intersection::group_boxes), so the
// result does not point into the layouts. tests/planner/intersect_test.cc checks results against
// the layouts themselves.
#include "planner/intersect.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "planner/conversion.h"

namespace ferry {
namespace {

// Box's equality, inline: the grouping compares millions of boxes.
bool SameBox(const Box& a, const Box& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.lo[d] != b.lo[d] || a.hi[d] != b.hi[d]) return false;
  }
  return true;
}

// Box's order (lexicographic on ndim, lo, hi) for two fragments of one table, read in place.
int CompareFragmentBoxes(const FragmentTable& table, size_t i, size_t j) {
  const int n = table.Ndim(i), m = table.Ndim(j);
  if (n != m) return n < m ? -1 : 1;
  const int count = FragmentTable::Count(n);
  const int64_t* a = table.Lo(i);
  const int64_t* b = table.Lo(j);
  for (int d = 0; d < 2 * count; ++d) {  // lo, then hi
    if (a[d] != b[d]) return a[d] < b[d] ? -1 : 1;
  }
  return 0;
}

// Whether fragment `i`'s box lies inside tensor `t`'s shape (and has its dims).
bool BoxInside(const FragmentTable& table, size_t i, const TensorSpec& t) {
  const int ndim = table.Ndim(i);
  bool ok = ndim == static_cast<int>(t.shape.size()) && ndim <= kMaxDims;
  const int64_t* lo = table.Lo(i);
  const int64_t* hi = table.Hi(i);
  for (int d = 0; ok && d < ndim; ++d) {
    ok = lo[d] >= 0 && lo[d] <= hi[d] && hi[d] <= t.shape[d];
  }
  return ok;
}

Status OutsideError(const Layout& layout, size_t index, const char* side) {
  const Fragment f = layout.fragments[index];
  const TensorSpec& t = layout.tensors[f.tensor];
  return InvalidArgument(std::string(side) + " fragment " + std::to_string(index) + " of '" +
                         t.name + "' on rank " + std::to_string(f.loc.rank) + ": box " +
                         f.box.ToString() + " is outside the tensor's shape " +
                         Box::FromShape(t.shape).ToString());
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

// Whether the unique source boxes of a tensor of at least 2 dims are each one whole index of dim 0
// ([e, e + 1) x the rest of the shape, as a trainer holds a tensor stack with one buffer per
// member); then unit_of[e] is the unique box of index e, or -1 where none holds it.
bool HeldMemberByMember(const std::vector<UniqueBox>& unique, const TensorSpec& spec,
                        std::vector<int>& unit_of) {
  const int ndim = static_cast<int>(spec.shape.size());
  if (ndim < 2 || unique.size() < 2) return false;
  for (const UniqueBox& u : unique) {
    if (u.box.ndim != ndim || u.box.hi[0] - u.box.lo[0] != 1) return false;
    for (int d = 1; d < ndim; ++d) {
      if (u.box.lo[d] != 0 || u.box.hi[d] != spec.shape[static_cast<size_t>(d)]) return false;
    }
  }
  unit_of.assign(static_cast<size_t>(spec.shape[0]), -1);
  for (size_t i = 0; i < unique.size(); ++i) {
    int& slot = unit_of[static_cast<size_t>(unique[i].box.lo[0])];
    if (slot >= 0) return false;  // equal boxes are one unique box; this cannot happen
    slot = static_cast<int>(i);
  }
  return true;
}

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

// Distinct lo values along `dim` among `boxes`. Boxes mostly come in order along the dim (or share
// one value there): then the distinct values are counted as they go, without a sort.
template <typename GetBox>
int DistinctLo(int count, GetBox get, int dim, std::vector<int64_t>& scratch) {
  scratch.clear();
  bool ascending = true;
  int distinct = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t lo = get(i).lo[dim];
    if (!scratch.empty()) {
      ascending = ascending && lo >= scratch.back();
      distinct += lo != scratch.back();
    } else {
      distinct = 1;
    }
    scratch.push_back(lo);
  }
  if (ascending) return distinct;
  std::sort(scratch.begin(), scratch.end());
  return static_cast<int>(std::unique(scratch.begin(), scratch.end()) - scratch.begin());
}

// What the fragment pass needs of a tensor. A *compact* tensor has 1 or 2 dims whose boxes pack
// into 64 bits: lo0, lo1, hi0, hi1 as fields of bits0, bits1, bits0, bits1 bits (the bits of the
// extents; bits1 = 0 for 1 dim). Their order and equality are then CompareBoxes' and SameBox's.
struct TensorInfo {
  bool compact = false;
  int ndim = 0;
  int bits0 = 0, bits1 = 0;
  uint64_t shape0 = 0, shape1 = 0;

  uint64_t Pack(uint64_t lo0, uint64_t lo1, uint64_t hi0, uint64_t hi1) const {
    return ((lo0 << bits1 | lo1) << bits0 | hi0) << bits1 | hi1;
  }
  uint64_t Whole() const { return Pack(0, 0, shape0, shape1); }
  // Elements in a packed box.
  int64_t Volume(uint64_t box) const {
    const uint64_t mask0 = (uint64_t{1} << bits0) - 1, mask1 = (uint64_t{1} << bits1) - 1;
    const uint64_t hi1 = box & mask1, hi0 = box >> bits1 & mask0;
    const uint64_t lo1 = box >> (bits1 + bits0) & mask1, lo0 = box >> (2 * bits1 + bits0);
    const uint64_t rows = hi0 - lo0;
    return static_cast<int64_t>(ndim == 2 ? rows * (hi1 - lo1) : rows);
  }
};

int BitWidth(uint64_t x) { return x == 0 ? 0 : 64 - __builtin_clzll(x); }

TensorInfo Describe(const std::vector<int64_t>& shape) {
  TensorInfo ti;
  ti.ndim = static_cast<int>(shape.size());
  if (ti.ndim < 1 || ti.ndim > 2 || shape[0] < 0 || (ti.ndim == 2 && shape[1] < 0)) return ti;
  ti.shape0 = static_cast<uint64_t>(shape[0]);
  ti.shape1 = ti.ndim == 2 ? static_cast<uint64_t>(shape[1]) : 0;
  // At least one bit for dim 0 keeps every shift below 64.
  ti.bits0 = std::max(1, BitWidth(ti.shape0));
  ti.bits1 = BitWidth(ti.shape1);
  ti.compact = ti.bits0 + ti.bits1 <= 32;
  return ti;
}

// Whether a tensor described by `ti` (with shape `full`) has shape `shape`.
bool SameShape(const TensorInfo& ti, const std::vector<int64_t>& full,
               const std::vector<int64_t>& shape) {
  if (!ti.compact) return full == shape;
  return static_cast<int>(shape.size()) == ti.ndim && static_cast<uint64_t>(shape[0]) == ti.shape0 &&
         (ti.ndim == 1 || static_cast<uint64_t>(shape[1]) == ti.shape1);
}

// A fragment's place in the planner's order within its tensor: (box, rank, fragment id). The box
// is packed (TensorInfo::Pack) for a compact tensor; otherwise it is 0 and read from the fragment.
struct FragKey {
  uint64_t box;
  uint64_t rank_id;  // (rank + 2^31) << 32 | id: rank's order, then id's

  int id() const { return static_cast<int>(static_cast<uint32_t>(rank_id)); }
  bool SameBox(const FragKey& o) const { return box == o.box; }
};

// A type, not a function, so that the sorts inline it.
struct KeyLess {
  bool operator()(const FragKey& a, const FragKey& b) const {
    return a.box != b.box ? a.box < b.box : a.rank_id < b.rank_id;
  }
};

// One layout's fragments: a sort key per fragment and the fragments of each tensor.
// Scratch written before it is read. Fragments a diverter takes have no key: `keys` holds the
// others in id order (a key carries its fragment's id), so a layout whose stacked experts are
// diverted (356k of DeepSeek-V3's 574k destination fragments) writes and sorts only the rest.
struct FragmentKeys {
  std::vector<FragKey> keys;      // in fragment id order, diverted ones left out
  std::vector<int> tensor_of;     // the tensor of each key
  bool by_tensor = false;         // fragments come ordered by tensor: `keys` serve as `sorted`
  std::vector<FragKey> sorted;  // by tensor (then as SortTensor leaves them)
  std::vector<int> tensor_begin;  // tensor t: sorted[tensor_begin[t] .. tensor_begin[t + 1])

  FragKey* TensorKeys(int t) { return (by_tensor ? keys.data() : sorted.data()) + tensor_begin[t]; }
};

// Validates every fragment of `layout` (the first invalid one in index order is the error) and
// fills `out`, reading each fragment once. Fragments `diverter` (if any) takes are left out: in
// no tensor's keys, rank -1.
Status ReadFragments(const Layout& layout, const std::vector<TensorInfo>& info, const char* side,
                     FragmentDiverter* diverter, FragmentKeys& out, std::vector<int>& ranks) {
  const size_t n = layout.fragments.size();
  const size_t num_tensors = layout.tensors.size();
  out.keys.resize(n);
  out.tensor_of.resize(n);
  ranks.resize(n);
  FragKey* keys = out.keys.data();
  int* tensor_of = out.tensor_of.data();
  size_t kept = 0;  // keys written
  std::vector<int>& begin = out.tensor_begin;
  begin.assign(num_tensors + 1, 0);
  bool by_tensor = true;  // fragments already ordered by tensor
  int previous = 0;
  const FragmentTable& frags = layout.fragments;
  for (size_t i = 0; i < n; ++i) {
    if (diverter != nullptr && diverter->Divert(frags, i)) {
      ranks[i] = -1;
      continue;
    }
    const int t = frags.Tensor(i);
    const int rank = frags.Rank(i);
    if (t < 0 || static_cast<size_t>(t) >= num_tensors) {
      return InvalidArgument(std::string(side) + " fragment " + std::to_string(i) + " on rank " +
                             std::to_string(rank) + " names tensor " + std::to_string(t) +
                             " but the layout has " + std::to_string(num_tensors) + " tensors");
    }
    const TensorInfo& ti = info[t];
    FragKey& key = keys[kept];
    if (ti.compact) {
      // A fragment of another ndim fails the test below without its values being read (it may
      // have fewer).
      const int ndim = frags.Ndim(i);
      const int64_t* lo = frags.Lo(i);
      const int64_t* hi = frags.Hi(i);
      const bool dims_ok = ndim == ti.ndim;
      const uint64_t lo0 = dims_ok ? static_cast<uint64_t>(lo[0]) : 0;
      const uint64_t hi0 = dims_ok ? static_cast<uint64_t>(hi[0]) : 0;
      uint64_t lo1 = 0, hi1 = 0;
      // As unsigned, lo <= hi <= shape also rules out negative values.
      bool ok = dims_ok && lo0 <= hi0 && hi0 <= ti.shape0;
      if (ti.ndim == 2 && dims_ok) {
        lo1 = static_cast<uint64_t>(lo[1]);
        hi1 = static_cast<uint64_t>(hi[1]);
        ok = ok && lo1 <= hi1 && hi1 <= ti.shape1;
      }
      if (!ok) return OutsideError(layout, i, side);
      key.box = ti.Pack(lo0, lo1, hi0, hi1);
    } else {
      if (!BoxInside(frags, i, layout.tensors[t])) return OutsideError(layout, i, side);
      key.box = 0;
    }
    key.rank_id = static_cast<uint64_t>(static_cast<uint32_t>(rank) ^ 0x80000000u) << 32 |
                  static_cast<uint32_t>(i);
    tensor_of[kept++] = t;
    ranks[i] = rank;
    ++begin[t + 1];
    by_tensor = by_tensor && t >= previous;
    previous = t;
  }
  for (size_t t = 0; t < num_tensors; ++t) begin[t + 1] += begin[t];
  out.by_tensor = by_tensor;
  if (!by_tensor) {
    // Counting sort by tensor (stable: id order within a tensor).
    out.sorted.resize(kept);
    FragKey* sorted = out.sorted.data();
    std::vector<int> next(begin.begin(), begin.end() - 1);
    for (size_t k = 0; k < kept; ++k) sorted[next[tensor_of[k]]++] = keys[k];
  }
  return Status::Ok();
}

// Sorts [first, last) by `less` (a strict total order), cheaply when it is made of a few sorted
// runs: a tensor's replicas usually come one after another, each sorted by box, so its fragments
// are k sorted runs merged pairwise in log2(k) sweeps. Many short runs: std::sort. `buffer` is
// scratch space.
template <typename Less>
void SortRuns(FragKey* first, FragKey* last, Less less, std::vector<FragKey>& buffer,
              std::vector<int>& runs) {
  const int n = static_cast<int>(last - first);
  runs.clear();
  runs.push_back(0);
  for (int i = 1; i < n; ++i) {
    if (less(first[i], first[i - 1])) runs.push_back(i);
  }
  if (runs.size() == 1) return;
  if (static_cast<int>(runs.size()) * 8 > n) {
    std::sort(first, last, less);
    return;
  }
  runs.push_back(n);
  buffer.resize(n);
  // Replicas of one sharding: k runs of the same length, the i-th elements of the runs adjacent in
  // the result (same box, ranks rising with the run). Interleave them and check.
  const int k = static_cast<int>(runs.size()) - 1;
  if (n % k == 0) {
    const int length = n / k;
    bool even = true;
    for (int r = 0; r <= k && even; ++r) even = runs[r] == r * length;
    if (even) {
      FragKey* out = buffer.data();
      for (int i = 0; i < length; ++i) {
        for (int r = 0; r < k; ++r) *out++ = first[r * length + i];
      }
      if (std::is_sorted(buffer.data(), buffer.data() + n, less)) {
        std::copy(buffer.data(), buffer.data() + n, first);
        return;
      }
    }
  }
  FragKey* from = first;
  FragKey* to = buffer.data();
  while (runs.size() > 2) {
    size_t kept = 0;
    size_t r = 0;
    for (; r + 2 < runs.size(); r += 2) {
      std::merge(from + runs[r], from + runs[r + 1], from + runs[r + 1], from + runs[r + 2],
                 to + runs[r], less);
      runs[kept++] = runs[r];
    }
    if (r + 1 < runs.size()) {  // an odd run out: copied as it is
      std::copy(from + runs[r], from + runs[r + 1], to + runs[r]);
      runs[kept++] = runs[r];
    }
    runs[kept++] = n;
    runs.resize(kept);
    std::swap(from, to);
  }
  if (from != first) std::copy(from, from + n, first);
}

// Scratch space of the per-tensor sorts.
struct SortScratch {
  std::vector<FragKey> buffer;
  std::vector<int> runs;
};

// Sorts the keys of tensor t's fragments by (box, rank, id), in place; returns them.
const FragKey* SortTensor(FragmentKeys& fk, int t, bool compact, const FragmentTable& frags,
                          SortScratch& scratch) {
  FragKey* first = fk.TensorKeys(t);
  FragKey* last = first + (fk.tensor_begin[t + 1] - fk.tensor_begin[t]);
  if (last - first < 2) return first;
  if (compact) {
    SortRuns(first, last, KeyLess(), scratch.buffer, scratch.runs);
    return first;
  }
  auto less = [&](const FragKey& a, const FragKey& b) {
    if (const int c = CompareFragmentBoxes(frags, a.id(), b.id()); c != 0) return c < 0;
    return a.rank_id < b.rank_id;
  };
  SortRuns(first, last, less, scratch.buffer, scratch.runs);
  return first;
}

// Open-addressing index of a layout's tensor names, filled in tensor order: the first tensor of
// each name.
class NameIndex {
 public:
  explicit NameIndex(const std::vector<TensorSpec>& tensors) : tensors_(tensors) {
    size_t size = 16;
    while (size < 2 * tensors.size()) size *= 2;
    mask_ = size - 1;
    slots_.assign(size, 0);
  }
  // The tag of a name, for Insert.
  static uint64_t Tag(std::string_view name) { return Hash(name) & ~uint64_t{0xffffffff}; }
  // Indexes tensor t, whose name has tag `tag` (after all tensors before it); false if an earlier
  // tensor has its name.
  bool Insert(int t, uint64_t tag) {
    const std::string& name = tensors_[t].name;
    for (size_t s = tag >> 32 & mask_;; s = (s + 1) & mask_) {
      if (slots_[s] == 0) {
        slots_[s] = tag | static_cast<uint64_t>(t + 1);
        return true;
      }
      if ((slots_[s] & ~uint64_t{0xffffffff}) == tag && tensors_[(slots_[s] & 0xffffffff) - 1].name == name) {
        return false;
      }
    }
  }
  // The first indexed tensor with this name, or -1.
  int Find(std::string_view name) const {
    const uint64_t tag = Hash(name) & ~uint64_t{0xffffffff};
    for (size_t s = tag >> 32 & mask_; slots_[s] != 0; s = (s + 1) & mask_) {
      const int t = static_cast<int>(slots_[s] & 0xffffffff) - 1;
      if ((slots_[s] & ~uint64_t{0xffffffff}) == tag && tensors_[t].name == name) return t;
    }
    return -1;
  }

 private:
  // Cheap: words folded by rotate and add (one short dependency per word), mixed once at the end.
  // Collisions cost only a string comparison.
  static uint64_t Hash(std::string_view s) {
    uint64_t h = s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = ((h << 7) | (h >> 57)) + w;
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (((h << 7) | (h >> 57)) + w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 29);
  }

  const std::vector<TensorSpec>& tensors_;
  size_t mask_ = 0;
  std::vector<uint64_t> slots_;  // high half: the name's hash; low half: tensor index + 1; 0: free
};

// Destination tensor -> source tensor by name (a repeated source name maps to its first tensor),
// with equal shape and equal dtypes or dtypes the planner converts (planner/conversion.h); describes the tensors of both sides for the fragment pass. The
// first destination tensor in order that is missing or differs is the error. Destination tensors
// the diverter takes whole are skipped (-1): their fragments never reach the pass.
//
// One visit per tensor name and shape: destination tensor t is first compared with source tensor
// t, which is the match when it has the name and is the first of that name (the usual case, no
// lookup); the others are looked up afterwards.
Status MapTensors(const Layout& source, const Layout& destination,
                  const FragmentDiverter* destination_diverter, std::vector<TensorInfo>& src_info,
                  std::vector<int>& src_of_dst, std::vector<TensorInfo>& dst_info) {
  const std::vector<TensorSpec>& src = source.tensors;
  const std::vector<TensorSpec>& dst = destination.tensors;
  const int num_src = static_cast<int>(src.size()), num_dst = static_cast<int>(dst.size());
  src_info.resize(num_src);
  src_of_dst.assign(num_dst, -1);
  dst_info.resize(num_dst);
  auto matches = [&](int t, int st) {
    return SameShape(src_info[st], src[st].shape, dst[t].shape) &&
           (src[st].dtype == dst[t].dtype || PlannerConverts(src[st].dtype, dst[t].dtype));
  };
  // Destination tensors whose fragments the diverter takes are left unmapped (-1).
  auto taken = [&](int t) {
    return destination_diverter != nullptr && destination_diverter->TakesWholeTensor(t);
  };
  // Source names known distinct (the layout's own name index says so; the usual case): every
  // tensor is the first of its name, and lookups go to the layout. Otherwise an index of our own,
  // filled in tensor order.
  const bool distinct = source.TensorNamesKnownDistinct();
  std::optional<NameIndex> names;
  if (!distinct) names.emplace(src);
  bool all_matched = true;
  for (int t = 0; t < std::max(num_src, num_dst); ++t) {
    bool first = false;  // source tensor t is the first of its name
    if (t < num_src) {
      src_info[t] = Describe(src[t].shape);
      first = distinct || names->Insert(t, NameIndex::Tag(src[t].name));
    }
    if (t < num_dst && !taken(t)) {
      if (first && src[t].name == dst[t].name && matches(t, t)) {
        src_of_dst[t] = t;
        dst_info[t] = src_info[t];
      } else {
        all_matched = false;
      }
    }
  }
  if (all_matched) return Status::Ok();
  for (int t = 0; t < num_dst; ++t) {
    if (src_of_dst[t] >= 0 || taken(t)) continue;
    const TensorSpec& d = dst[t];
    const int st = distinct ? source.FindTensor(d.name) : names->Find(d.name);
    if (st < 0) {
      return InvalidArgument("destination tensor '" + d.name + "' does not exist in the source");
    }
    const TensorSpec& s = src[st];
    if (!matches(t, st) && SameShape(src_info[st], s.shape, d.shape)) {
      return InvalidArgument("tensor '" + d.name + "' is " + std::string(DTypeName(s.dtype)) +
                             " in the source and " + std::string(DTypeName(d.dtype)) +
                             " in the destination, a conversion ferry does not plan (it plans "
                             "bf16/fp16/fp32 among each other and to fp8_e4m3/fp8_e5m2)");
    }
    if (!matches(t, st)) {
      return InvalidArgument("tensor '" + d.name + "' is " + Box::FromShape(s.shape).ToString() +
                             " " + std::string(DTypeName(s.dtype)) + " in the source but " +
                             Box::FromShape(d.shape).ToString() + " " +
                             std::string(DTypeName(d.dtype)) + " in the destination");
    }
    src_of_dst[t] = st;
    dst_info[t] = src_info[st];
  }
  return Status::Ok();
}

}  // namespace

void Intersection::AddPiece(int group, const Box& box, int holders_begin, int holders_end) {
  Piece p;
  p.group = group;
  if (!SameBox(box, *groups[group].box)) {
    p.box = static_cast<int>(piece_boxes.size());
    piece_boxes.push_back(box);
  }
  p.holders_begin = holders_begin;
  p.holders_end = holders_end;
  pieces.push_back(p);
}

void Intersection::AddMemberPiece(int group, int64_t member, int holders_begin, int holders_end) {
  const Box& box = *groups[group].box;
  if (box.Extent(0) == 1 || member > kMaxMemberCut) {
    Box cut = box;
    CutAtMember(cut, member);
    AddPiece(group, cut, holders_begin, holders_end);
    return;
  }
  Piece p;
  p.group = group;
  p.box = -2 - static_cast<int>(member);
  p.holders_begin = holders_begin;
  p.holders_end = holders_end;
  pieces.push_back(p);
}

Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination) {
  return IntersectLayouts(source, destination, nullptr, nullptr);
}

void AppendIntersection(Intersection& into, Intersection&& more, int src_tensor_offset,
                        int dst_tensor_offset) {
  const int src_frag_offset = static_cast<int>(into.source_ranks.size());
  const int dst_frag_offset = static_cast<int>(into.destination_ranks.size());
  const int group_offset = static_cast<int>(into.groups.size());
  const int group_frag_offset = static_cast<int>(into.group_frags.size());
  const int holder_offset = static_cast<int>(into.holders.size());
  const int box_offset = static_cast<int>(into.piece_boxes.size());
  for (FragmentGroup g : more.groups) {
    g.dst_tensor += dst_tensor_offset;
    g.src_tensor += src_tensor_offset;
    g.frags_begin += group_frag_offset;
    g.frags_end += group_frag_offset;
    into.groups.push_back(g);
  }
  // Group i's box is group_boxes[i]; the list may move as it grows, so every group is pointed at
  // its box again.
  into.group_boxes.insert(into.group_boxes.end(), more.group_boxes.begin(), more.group_boxes.end());
  for (size_t i = 0; i < into.groups.size(); ++i) into.groups[i].box = &into.group_boxes[i];
  for (int f : more.group_frags) into.group_frags.push_back(f + dst_frag_offset);
  for (Piece p : more.pieces) {
    p.group += group_offset;
    if (p.box >= 0) p.box += box_offset;
    p.holders_begin += holder_offset;
    p.holders_end += holder_offset;
    into.pieces.push_back(p);
  }
  for (int h : more.holders) into.holders.push_back(h + src_frag_offset);
  if (into.piece_boxes.empty()) {
    into.piece_boxes = std::move(more.piece_boxes);  // box_offset is 0: indexes stay
  } else {
    for (size_t i = 0; i < more.piece_boxes.size(); ++i) {
      into.piece_boxes.push_back(more.piece_boxes[i]);
    }
  }
  into.source_ranks.insert(into.source_ranks.end(), more.source_ranks.begin(),
                           more.source_ranks.end());
  into.destination_ranks.insert(into.destination_ranks.end(), more.destination_ranks.begin(),
                                more.destination_ranks.end());
}

namespace {

// Cuts one destination tensor's groups into pieces, each held by the source fragments that hold
// its box: indexes the unique source boxes of the tensor's source tensor (their fragments are
// appended to out.holders) and intersects every group box with them. Holds the scratch that the
// tensors of one IntersectLayouts call reuse.
class GroupCutter {
 public:
  GroupCutter(const Layout& source, const Layout& destination, const std::vector<TensorInfo>& src_info,
              FragmentKeys& src, Intersection& out)
      : destination_(destination), src_frags_(source.fragments), dst_frags_(destination.fragments),
        src_info_(src_info), src_(src), out_(out) {}

  // Cuts the groups [gi, gend) of destination tensor `dst_tensor`.
  Status Cut(int dst_tensor, size_t gi, size_t gend) {
    spec_ = &destination_.tensors[dst_tensor];
    gi_ = gi;
    gend_ = gend;
    const int st = out_.groups[gi].src_tensor;
    src_keys_ = SortTensor(src_, st, src_info_[st].compact, src_frags_, src_scratch_);
    src_count_ = src_.tensor_begin[st + 1] - src_.tensor_begin[st];
    holders_base_ = static_cast<int>(out_.holders.size());
    for (int i = 0; i < src_count_; ++i) out_.holders.push_back(src_keys_[i].id());
    if (src_info_[st].compact && CutWholeCompact(src_info_[st])) return Status::Ok();
    CollectUniqueBoxes();
    if (HeldMemberByMember(unique_, *spec_, unit_of_)) return CutMemberByMember();
    if (unique_.size() == 1 && unique_[0].box == Box::FromShape(spec_->shape)) {
      // The source holds the tensor whole (replicas of it): each group is one piece.
      for (size_t g = gi_; g < gend_; ++g) AddWholePiece(g, unique_[0].holders_begin, unique_[0].holders_end);
      return Status::Ok();
    }
    brute_ = static_cast<int64_t>(unique_.size()) * static_cast<int64_t>(gend_ - gi_) <= 256;
    if (!brute_) index_.Build(unique_, SweepDim());
    const bool disjoint = SourcesDisjoint();
    for (size_t g = gi_; g < gend_; ++g) {
      FERRY_RETURN_IF_ERROR(disjoint ? CutDisjoint(g) : CarveOverlapping(g));
    }
    return Status::Ok();
  }

 private:
  void AddWholePiece(size_t g, int holders_begin, int holders_end) {
    Piece p;
    p.group = static_cast<int>(g);
    p.holders_begin = holders_begin;
    p.holders_end = holders_end;
    out_.pieces.push_back(p);
  }

  // A compact source that holds the tensor whole (replicas of it, besides empty boxes): each
  // group is one piece. False when the source holds anything else.
  bool CutWholeCompact(const TensorInfo& ti) {
    const uint64_t whole = ti.Whole();
    int whole_begin = -1, whole_end = -1;
    for (int i = 0; i < src_count_; ++i) {
      const FragKey& k = src_keys_[i];
      if (ti.Volume(k.box) == 0) continue;
      if (k.box != whole) return false;
      if (whole_begin < 0) whole_begin = i;
      whole_end = i + 1;
    }
    if (whole_begin < 0) return false;
    for (size_t g = gi_; g < gend_; ++g) AddWholePiece(g, holders_base_ + whole_begin, holders_base_ + whole_end);
    return true;
  }

  // The distinct non-empty source boxes, each with the run of holders that hold it.
  void CollectUniqueBoxes() {
    unique_.clear();
    for (int i = 0; i < src_count_;) {
      const int first = src_keys_[i].id();
      int j = i + 1;
      while (j < src_count_ && src_frags_.SameBox(src_keys_[j].id(), first)) ++j;
      if (src_frags_.Volume(first) > 0) {
        UniqueBox u;
        u.box = src_frags_.BoxOf(first);
        u.holders_begin = holders_base_ + i;
        u.holders_end = holders_base_ + j;
        unique_.push_back(u);
      }
      i = j;
    }
  }

  // The error for group g's box, which its source boxes do not cover.
  Status NotCovered(size_t g) const {
    const int rank = dst_frags_.Rank(out_.group_frags[out_.groups[g].frags_begin]);
    return InvalidArgument("tensor '" + spec_->name + "': destination region " + out_.groups[g].box->ToString() +
                           " on rank " + std::to_string(rank) + " is not fully covered by source fragments");
  }

  // A tensor stack the source holds one whole member per fragment (a trainer with a buffer per
  // expert): each group is cut at its members, each cut held by that member's holders. The cuts
  // are member cuts, with no box of their own.
  Status CutMemberByMember() {
    for (size_t g = gi_; g < gend_; ++g) {
      const Box& q = *out_.groups[g].box;
      for (int64_t e = q.lo[0]; e < q.hi[0]; ++e) {
        const int u = unit_of_[static_cast<size_t>(e)];
        if (u < 0) return NotCovered(g);
        out_.AddMemberPiece(static_cast<int>(g), e, unique_[u].holders_begin, unique_[u].holders_end);
      }
    }
    return Status::Ok();
  }

  // The dimension along which both sides' boxes start at the most distinct places: the sweep
  // index's axis.
  int SweepDim() {
    const int num_unique = static_cast<int>(unique_.size());
    const int num_groups = static_cast<int>(gend_ - gi_);
    int best_dim = 0, best_min = -1, best_sum = -1;
    for (int d = 0; d < static_cast<int>(spec_->shape.size()); ++d) {
      const int ks = DistinctLo(num_unique, [&](int i) -> const Box& { return unique_[i].box; }, d, scratch_);
      const int kd =
          DistinctLo(num_groups, [&](int i) -> const Box& { return *out_.groups[gi_ + i].box; }, d, scratch_);
      const int mn = std::min(ks, kd), sum = ks + kd;
      if (mn > best_min || (mn == best_min && sum > best_sum)) {
        best_min = mn;
        best_sum = sum;
        best_dim = d;
      }
    }
    return best_dim;
  }

  // candidates_ = the unique source boxes that intersect `q`, in index order.
  void Query(const Box& q) {
    candidates_.clear();
    if (brute_) {
      for (int u = 0; u < static_cast<int>(unique_.size()); ++u) {
        if (unique_[u].box.Intersects(q)) candidates_.push_back(u);
      }
      return;
    }
    index_.Query(unique_, q, candidates_);
    std::sort(candidates_.begin(), candidates_.end());
  }

  // Whether the unique source boxes are pairwise disjoint (one sharding, any number of replicas).
  bool SourcesDisjoint() {
    int64_t volume = 0;
    for (const UniqueBox& u : unique_) volume += u.box.Volume();
    if (volume > spec_->NumElements()) return false;
    if (unique_.size() <= 1) return true;
    for (const UniqueBox& u : unique_) {
      Query(u.box);
      if (candidates_.size() != 1) return false;
    }
    return true;
  }

  // Disjoint sources: group g's pieces are its intersections with the source boxes.
  Status CutDisjoint(size_t g) {
    const Box& q = *out_.groups[g].box;
    Query(q);
    if (candidates_.size() == 1 && unique_[candidates_[0]].box.Contains(q)) {
      // Inside one source box (a slice of a larger shard): the piece is the group's box.
      AddWholePiece(g, unique_[candidates_[0]].holders_begin, unique_[candidates_[0]].holders_end);
      return Status::Ok();
    }
    int64_t covered = 0;
    for (int u : candidates_) {
      const Box box = q.Intersect(unique_[u].box);
      covered += box.Volume();
      out_.AddPiece(static_cast<int>(g), box, unique_[u].holders_begin, unique_[u].holders_end);
    }
    return covered == q.Volume() ? Status::Ok() : NotCovered(g);
  }

  // Source boxes overlap each other: carve group g's box greedily, each carved box held by every
  // source box that contains it (holders sorted by rank).
  Status CarveOverlapping(size_t g) {
    Query(*out_.groups[g].box);
    remaining_.assign(1, *out_.groups[g].box);
    for (int u : candidates_) {
      next_remaining_.clear();
      for (const Box& r : remaining_) {
        const Box x = r.Intersect(unique_[u].box);
        if (x.Empty()) {
          next_remaining_.push_back(r);
          continue;
        }
        AddCarvedPiece(g, x);
        Subtract(r, x, next_remaining_);
      }
      remaining_.swap(next_remaining_);
      if (remaining_.empty()) break;
    }
    if (remaining_.empty()) return Status::Ok();
    return InvalidArgument("tensor '" + spec_->name + "': destination region " + remaining_.front().ToString() +
                           " is not covered by any source fragment");
  }

  void AddCarvedPiece(size_t g, const Box& x) {
    merged_holders_.clear();
    for (int v : candidates_) {
      if (unique_[v].box.Contains(x)) {
        merged_holders_.insert(merged_holders_.end(), out_.holders.begin() + unique_[v].holders_begin,
                               out_.holders.begin() + unique_[v].holders_end);
      }
    }
    std::sort(merged_holders_.begin(), merged_holders_.end(), [&](int a, int b) {
      const int ra = src_frags_.Rank(a), rb = src_frags_.Rank(b);
      return ra != rb ? ra < rb : a < b;
    });
    const int holders_begin = static_cast<int>(out_.holders.size());
    out_.holders.insert(out_.holders.end(), merged_holders_.begin(), merged_holders_.end());
    out_.AddPiece(static_cast<int>(g), x, holders_begin, static_cast<int>(out_.holders.size()));
  }

  const Layout& destination_;
  const FragmentTable& src_frags_;
  const FragmentTable& dst_frags_;
  const std::vector<TensorInfo>& src_info_;
  FragmentKeys& src_;
  Intersection& out_;
  // The tensor being cut.
  const TensorSpec* spec_ = nullptr;
  size_t gi_ = 0, gend_ = 0;
  const FragKey* src_keys_ = nullptr;
  int src_count_ = 0, holders_base_ = 0;
  bool brute_ = true;
  // Scratch reused across tensors.
  SortScratch src_scratch_;
  std::vector<UniqueBox> unique_;
  std::vector<int> candidates_;
  std::vector<int> unit_of_;  // HeldMemberByMember: per index of dim 0, its unique box or -1
  std::vector<int64_t> scratch_;
  std::vector<Box> remaining_, next_remaining_;
  std::vector<int> merged_holders_;
  SweepIndex index_;
};

// Appends destination tensor t's groups (runs of one box; group_frags holds every fragment not
// diverted, those of empty boxes too, in no group) to `out`.
void GroupTensor(int t, const Layout& destination, const TensorInfo& info, int src_tensor, FragmentKeys& dst,
                 SortScratch& sort_scratch, Intersection& out) {
  const FragmentTable& dst_frags = destination.fragments;
  const bool compact = info.compact;
  const int base = dst.tensor_begin[t];
  const int end = dst.tensor_begin[t + 1] - base;
  const FragKey* keys = SortTensor(dst, t, compact, dst_frags, sort_scratch);
  for (int i = 0; i < end;) {
    const FragKey& k = keys[i];
    FragmentGroup g;
    g.dst_tensor = t;
    g.src_tensor = src_tensor;
    g.frags_begin = base + i;
    int j = i;
    if (compact) {
      for (; j < end && keys[j].SameBox(k); ++j) out.group_frags.push_back(keys[j].id());
    } else {
      for (; j < end && dst_frags.SameBox(keys[j].id(), k.id()); ++j) out.group_frags.push_back(keys[j].id());
    }
    g.frags_end = base + j;
    g.volume = compact ? info.Volume(k.box) : dst_frags.Volume(k.id());
    if (g.volume > 0) {
      out.group_boxes.push_back(dst_frags.BoxOf(k.id()));
      g.box = &out.group_boxes.back();
      out.groups.push_back(g);
    }
    i = j;
  }
}

}  // namespace

Result<Intersection> IntersectLayouts(const Layout& source, const Layout& destination,
                                      FragmentDiverter* source_diverter,
                                      FragmentDiverter* destination_diverter) {
  Intersection out;
  std::vector<TensorInfo> src_info, dst_info;
  std::vector<int> src_of_dst;
  FERRY_RETURN_IF_ERROR(MapTensors(source, destination, destination_diverter, src_info, src_of_dst, dst_info));
  // Both sides' fragments validated, then sorted by (tensor, box, rank, id) one tensor at a time.
  FragmentKeys src, dst;
  FERRY_RETURN_IF_ERROR(ReadFragments(source, src_info, "source", source_diverter, src, out.source_ranks));
  FERRY_RETURN_IF_ERROR(
      ReadFragments(destination, dst_info, "destination", destination_diverter, dst, out.destination_ranks));
  const size_t num_dst_frags = destination.fragments.size();
  out.group_frags.reserve(num_dst_frags);
  out.groups.reserve(num_dst_frags);
  out.group_boxes.reserve(num_dst_frags);  // at most a group per fragment: boxes never move
  out.pieces.reserve(num_dst_frags);
  out.holders.reserve(source.fragments.size());
  SortScratch sort_scratch;
  GroupCutter cutter(source, destination, src_info, src, out);
  for (int t = 0; t < static_cast<int>(destination.tensors.size()); ++t) {
    if (src_of_dst[t] < 0 && dst.tensor_begin[t + 1] > dst.tensor_begin[t]) {
      return InvalidArgument("destination tensor '" + destination.tensors[t].name +
                             "' has fragments its diverter said it would take");
    }
    const size_t first_group = out.groups.size();
    GroupTensor(t, destination, dst_info[t], src_of_dst[t], dst, sort_scratch, out);
    // Pieces right after the groups, while they are in the cache.
    if (out.groups.size() > first_group) FERRY_RETURN_IF_ERROR(cutter.Cut(t, first_group, out.groups.size()));
  }
  return out;
}

}  // namespace ferry
