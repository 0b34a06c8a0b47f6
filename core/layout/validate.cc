// Layout validation: structure, bounds, strides, buffers, ranks, memory overlap and coverage.
//
// Memory overlap. Fragments are compared only within one buffer (distinct buffers are distinct
// allocations). Fragments are sorted by byte span and swept, so only pairs whose spans [first,
// last] overlap are examined; each such pair is then decided as follows:
//  * EXACT when the byte strides of both fragments (each dim's stride times the element size, plus
//    the byte itself as a dim of stride 1) form a divisibility chain t0 > t1 > ... > 1 with
//    t[i] % t[i+1] == 0, and each fragment fits that chain without wrapping. Then every byte
//    offset has one mixed-radix representation in the chain, each fragment is exactly a box in
//    those "virtual" coordinates, and the fragments share a byte iff their virtual boxes intersect.
//    This covers the common cases: row- or column-major sub-blocks of one array (column strips of a
//    row-major buffer, pieces of a fused concat along any dim, Megatron's interleaved QKV, FSDP
//    flat shards), including pieces of different dtypes when the sizes divide.
//  * CONSERVATIVE otherwise: overlapping spans are reported as overlapping. Such a layout may in
//    truth interleave without sharing a byte; the message says that the check was conservative.
// A single fragment that maps two of its own elements to one byte is rejected by the same rule
// (exact for chain strides; otherwise it must satisfy the sufficient condition that each stride
// exceeds the reach of all smaller ones).
//
// Coverage. For each tensor the distinct fragment boxes (replicas collapse) and the padding boxes
// are swept dim by dim: the breakpoints along a dim cut it into slabs in which the set of boxes
// that span the slab is constant; a slab with no box is a hole, otherwise the slab is checked
// recursively in the remaining dims (skipped when its set equals the previous, already-covered
// slab's). The cost is about O(n log n) for shard, replica and FSDP patterns; never per element.
#include "core/layout/validate.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/base/checked_math.h"
#include "core/base/strings.h"
#include "core/layout/limits.h"
#include "core/layout/tensor_stack.h"

namespace ferry {
namespace {

// "[0, 1, 2]" with at most 16 entries shown.
std::string RankList(const std::set<int>& ranks) {
  std::string s = "[";
  int shown = 0;
  for (int r : ranks) {
    if (shown == 16) {
      s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
      break;
    }
    if (shown++) s += ", ";
    s += std::to_string(r);
  }
  return s + "]";
}

std::string TensorName(const Layout& l, int t) {
  if (t >= 0 && t < static_cast<int>(l.tensors.size())) return "'" + l.tensors[t].name + "'";
  return "#" + std::to_string(t);
}

std::string Describe(const Layout& l, size_t index) {
  const Fragment& f = l.fragments[index];
  std::string s = "fragment " + std::to_string(index) + " (tensor " + TensorName(l, f.tensor) +
                  " " + f.box.ToString() + " on rank " + std::to_string(f.loc.rank);
  if (f.loc.buffer >= 0 && f.loc.buffer < static_cast<int>(l.buffers.size())) {
    s += ", buffer '" + l.buffers[f.loc.buffer].name + "'";
  }
  return s + ")";
}

Status CheckTensors(const Layout& l) {
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    const TensorSpec& t = l.tensors[i];
    if (t.name.empty()) return InvalidArgument("tensor " + std::to_string(i) + " has no name");
    if (!names.insert(t.name).second) {
      return InvalidArgument("tensor '" + t.name + "' is declared twice");
    }
    if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kMaxDims)) {
      return InvalidArgument("tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                             " dims; ferry supports 1 to 8");
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] <= 0) {
        return InvalidArgument("tensor '" + t.name + "' has shape " + FormatInts(t.shape) +
                               " with non-positive extent in dim " + std::to_string(d));
      }
    }
    if (t.NumBytes() > kMaxBytes) {
      return InvalidArgument("tensor '" + t.name + "' of shape " + FormatInts(t.shape) + " (" +
                             std::string(DTypeName(t.dtype)) + ") is over the limit of " +
                             std::to_string(kMaxBytes) + " bytes per tensor (kMaxBytes)");
    }
  }
  // Tensor stacks (core/layout/tensor_stack.h): [members, ...member shape], no member named twice.
  for (const TensorSpec& t : l.tensors) {
    const std::optional<TensorStackName> stack = ParseTensorStackName(t.name);
    if (!stack) continue;
    if (stack->size() > kMaxStackMembers) {
      return InvalidArgument("tensor stack '" + t.name + "' has " + std::to_string(stack->size()) +
                             " members, over the limit of " + std::to_string(kMaxStackMembers) +
                             " (kMaxStackMembers)");
    }
    FERRY_RETURN_IF_ERROR(CheckTensorStackShape(t, *stack));
    for (int64_t m = stack->first; m < stack->end; ++m) {
      if (names.count(stack->MemberName(m))) {
        return InvalidArgument("tensor '" + stack->MemberName(m) + "' is also member " +
                               std::to_string(m) + " of tensor stack '" + t.name + "'");
      }
    }
  }
  return Status::Ok();
}

Status CheckRank(int rank, const ValidateOptions& o, const std::string& what) {
  if (rank < 0) return InvalidArgument(what + " is on negative rank " + std::to_string(rank));
  if (rank >= kMaxRanks) {
    return InvalidArgument(what + " is on rank " + std::to_string(rank) + ", over the limit of " +
                           std::to_string(kMaxRanks) + " ranks (kMaxRanks)");
  }
  if (o.known_ranks && !o.known_ranks->count(rank)) {
    std::string known = o.known_ranks->empty()
                            ? std::string("none")
                            : std::to_string(*o.known_ranks->begin()) + ".." +
                                  std::to_string(*o.known_ranks->rbegin()) + " (" +
                                  std::to_string(o.known_ranks->size()) + " ranks)";
    return InvalidArgument(what + " is on rank " + std::to_string(rank) +
                           ", which is not a known rank (known: " + known + ")");
  }
  return Status::Ok();
}

Status CheckBuffers(const Layout& l, const ValidateOptions& o) {
  std::unordered_set<std::string> keys;
  for (size_t i = 0; i < l.buffers.size(); ++i) {
    const BufferSpec& b = l.buffers[i];
    const std::string what = "buffer '" + b.name + "' on rank " + std::to_string(b.rank);
    FERRY_RETURN_IF_ERROR(CheckRank(b.rank, o, "buffer '" + b.name + "'"));
    if (b.name.empty()) {
      return InvalidArgument("buffer " + std::to_string(i) + " on rank " + std::to_string(b.rank) +
                             " has no name");
    }
    if (b.bytes < 0) return InvalidArgument(what + " has negative size");
    if (b.bytes > kMaxBytes) {
      return InvalidArgument(what + " has " + std::to_string(b.bytes) + " bytes, over the limit of " +
                             std::to_string(kMaxBytes) + " (kMaxBytes)");
    }
    if (!keys.insert(std::to_string(b.rank) + '\n' + b.name).second) {
      return InvalidArgument(what + " is declared twice");
    }
  }
  return Status::Ok();
}

Status CheckFragment(const Layout& l, size_t i, const ValidateOptions& o) {
  const Fragment& f = l.fragments[i];
  if (f.tensor < 0 || f.tensor >= static_cast<int>(l.tensors.size())) {
    return InvalidArgument("fragment " + std::to_string(i) + " on rank " +
                           std::to_string(f.loc.rank) + " refers to tensor index " +
                           std::to_string(f.tensor) + " but the layout has " +
                           std::to_string(l.tensors.size()) + " tensors");
  }
  const TensorSpec& t = l.tensors[f.tensor];
  // Built only on the error path: validation runs over 100k+ fragments.
  auto what = [&] { return Describe(l, i); };
  if (f.loc.rank < 0 || f.loc.rank >= kMaxRanks ||
      (o.known_ranks && !o.known_ranks->count(f.loc.rank))) {
    return CheckRank(f.loc.rank, o, what());
  }
  if (f.box.ndim != static_cast<int>(t.shape.size())) {
    return InvalidArgument(what() + " has " + std::to_string(f.box.ndim) + " dims but tensor '" +
                           t.name + "' has shape " + FormatInts(t.shape));
  }
  for (int d = 0; d < f.box.ndim; ++d) {
    if (f.box.lo[d] < 0 || f.box.lo[d] > f.box.hi[d] || f.box.hi[d] > t.shape[d]) {
      return InvalidArgument(what() + " is out of bounds of tensor '" + t.name + "' shape " +
                             FormatInts(t.shape) + " in dim " + std::to_string(d));
    }
    if (f.loc.strides[d] <= 0) {
      return InvalidArgument(what() + " has non-positive stride " +
                             std::to_string(f.loc.strides[d]) + " in dim " + std::to_string(d));
    }
    if (f.loc.strides[d] > kMaxBytes) {
      return InvalidArgument(what() + " has stride " + std::to_string(f.loc.strides[d]) +
                             " in dim " + std::to_string(d) + ", over the limit of " +
                             std::to_string(kMaxBytes) + " (kMaxBytes)");
    }
  }
  if (f.loc.buffer < 0 || f.loc.buffer >= static_cast<int>(l.buffers.size())) {
    return InvalidArgument(what() + " refers to buffer index " + std::to_string(f.loc.buffer) +
                           " but the layout has " + std::to_string(l.buffers.size()) + " buffers");
  }
  const BufferSpec& b = l.buffers[f.loc.buffer];
  if (b.rank != f.loc.rank) {
    return InvalidArgument(what() + " is stored in buffer '" + b.name + "' of rank " +
                           std::to_string(b.rank) + ", not of its own rank");
  }
  if (f.loc.byte_offset < 0) {
    return InvalidArgument(what() + " has negative byte offset " +
                           std::to_string(f.loc.byte_offset));
  }
  auto [offset, length] = l.FragmentSpan(f);  // saturating
  if (SatAdd(offset, length) > kMaxBytes) {
    return InvalidArgument(what() + " reaches past byte " + std::to_string(kMaxBytes) +
                           " of its buffer (byte offset " + std::to_string(offset) +
                           ", span of its strides), over the limit (kMaxBytes)");
  }
  if (offset + length > b.bytes) {
    return InvalidArgument(what() + " occupies bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + length) + ") outside buffer '" + b.name +
                           "' of " + std::to_string(b.bytes) + " bytes");
  }
  return Status::Ok();
}

// A fragment's bytes as a strided set: offset + sum_k i_k * stride[k], 0 <= i_k < extent[k], over
// the dims of extent > 1 plus the bytes of one element (stride 1).
struct StridedBytes {
  int64_t offset = 0;
  int n = 0;
  std::array<int64_t, kMaxDims + 1> stride{};
  std::array<int64_t, kMaxDims + 1> extent{};
};

StridedBytes ToStridedBytes(const Layout& l, const Fragment& f) {
  StridedBytes s;
  const int64_t elem = DTypeSize(l.tensors[f.tensor].dtype);
  s.offset = f.loc.byte_offset;
  for (int d = 0; d < f.box.ndim; ++d) {
    if (f.box.Extent(d) > 1) {
      s.stride[s.n] = f.loc.strides[d] * elem;
      s.extent[s.n] = f.box.Extent(d);
      ++s.n;
    }
  }
  if (elem > 1) {
    s.stride[s.n] = 1;
    s.extent[s.n] = elem;
    ++s.n;
  }
  return s;
}

// Descending distinct strides of both sets plus 1, if each divides the one before; else empty.
std::vector<int64_t> StrideChain(const StridedBytes& a, const StridedBytes* b) {
  std::vector<int64_t> chain = {1};
  for (int k = 0; k < a.n; ++k) chain.push_back(a.stride[k]);
  if (b) {
    for (int k = 0; k < b->n; ++k) chain.push_back(b->stride[k]);
  }
  std::sort(chain.begin(), chain.end(), std::greater<int64_t>());
  chain.erase(std::unique(chain.begin(), chain.end()), chain.end());
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (chain[i] % chain[i + 1] != 0) return {};
  }
  return chain;
}

// The virtual box [lo, hi) of `s` in the mixed-radix coordinates of `chain`, or false when `s` is
// not a box there. A dim of stride chain[i] whose extent exceeds the radix chain[i-1] / chain[i]
// carries into the coarser level when it starts at coordinate 0 and its extent is a multiple of
// the radix (an fp32 element spans both bf16 levels, say); a level used by two dims, or a dim
// that wraps part-way, is not a box.
bool VirtualBox(const StridedBytes& s, const std::vector<int64_t>& chain, std::vector<int64_t>& lo,
                std::vector<int64_t>& hi) {
  const size_t m = chain.size();
  lo.assign(m, 0);
  int64_t rem = s.offset;
  for (size_t i = 0; i < m; ++i) {
    lo[i] = rem / chain[i];
    rem %= chain[i];
  }
  std::vector<int64_t> extent(m, 1);
  std::vector<bool> used(m, false);
  for (int k = 0; k < s.n; ++k) {
    size_t i = std::find(chain.begin(), chain.end(), s.stride[k]) - chain.begin();
    int64_t n = s.extent[k];
    while (true) {
      if (used[i]) return false;
      used[i] = true;
      const int64_t radix = chain[i - (i > 0 ? 1 : 0)] / chain[i];
      if (i == 0 || lo[i] + n <= radix) {
        extent[i] = n;
        break;
      }
      if (lo[i] != 0 || n % radix != 0) return false;
      extent[i] = radix;
      n /= radix;
      --i;
    }
  }
  hi.resize(m);
  for (size_t i = 0; i < m; ++i) hi[i] = lo[i] + extent[i];
  return true;
}

// Whether the fragment maps two of its elements to one byte (see the file comment). First the
// allocation-free sufficient condition (each stride exceeds the reach of all smaller ones), which
// every row- or column-major fragment meets; then the exact chain test.
bool SelfOverlaps(const StridedBytes& s) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims + 1> dims;  // (stride, extent)
  for (int k = 0; k < s.n; ++k) dims[k] = {s.stride[k], s.extent[k]};
  std::sort(dims.begin(), dims.begin() + s.n);
  int64_t reach = 0;
  bool injective = true;
  for (int k = 0; k < s.n && injective; ++k) {
    if (dims[k].first <= reach) injective = false;
    reach += (dims[k].second - 1) * dims[k].first;
  }
  if (injective) return false;
  std::vector<int64_t> chain = StrideChain(s, nullptr);
  std::vector<int64_t> lo, hi;
  return chain.empty() || !VirtualBox(s, chain, lo, hi);
}

enum class PairOverlap { kNone, kExact, kConservative };

PairOverlap FragmentsOverlap(const StridedBytes& a, const StridedBytes& b) {
  std::vector<int64_t> chain = StrideChain(a, &b);
  std::vector<int64_t> alo, ahi, blo, bhi;
  if (!chain.empty() && VirtualBox(a, chain, alo, ahi) && VirtualBox(b, chain, blo, bhi)) {
    for (size_t i = 0; i < chain.size(); ++i) {
      if (std::max(alo[i], blo[i]) >= std::min(ahi[i], bhi[i])) return PairOverlap::kNone;
    }
    return PairOverlap::kExact;
  }
  return PairOverlap::kConservative;  // spans already overlap
}

// Each block-scaled buffer pair (BlockScaledBuffer): buffers of the layout on one rank, sizes
// that multiply without overflow and match the buffers' bytes, and no buffer listed twice.
Status CheckBlockScaled(const Layout& l) {
  const int n = static_cast<int>(l.buffers.size());
  std::unordered_set<int> seen;
  for (const BlockScaledBuffer& s : l.block_scaled) {
    const std::string what = "block-scaled buffer #" + std::to_string(s.buffer);
    if (s.buffer < 0 || s.buffer >= n || s.scales < 0 || s.scales >= n || s.buffer == s.scales) {
      return InvalidArgument(what + ": buffer or scales #" + std::to_string(s.scales) +
                             " outside the layout's " + std::to_string(n) + " buffers");
    }
    if (!seen.insert(s.buffer).second || !seen.insert(s.scales).second) {
      return InvalidArgument(what + ": a buffer listed twice in block_scaled");
    }
    const BufferSpec& b = l.buffers[static_cast<size_t>(s.buffer)];
    const BufferSpec& k = l.buffers[static_cast<size_t>(s.scales)];
    if (b.rank != k.rank || s.matrices < 1 || s.rows < 1 || s.cols < 1) {
      return InvalidArgument(what + " ('" + b.name + "'): scales on another rank or empty matrices");
    }
    // rows and cols are at most the buffer's bytes (a limit) once the values match it.
    const bool values_match = SatMul(SatMul(s.matrices, s.rows), s.cols) == b.bytes;
    if (!values_match ||
        SatMul(s.matrices, Fp8ScaleMatrixBytes(s.scale_fmt, s.rows, s.cols)) != k.bytes) {
      return InvalidArgument(what + " ('" + b.name + "'): " + std::to_string(s.matrices) + " x [" +
                             std::to_string(s.rows) + ", " + std::to_string(s.cols) +
                             "] fp8 matrices do not match its " + std::to_string(b.bytes) +
                             " bytes or their " + std::string(Fp8ScaleFormatName(s.scale_fmt)) +
                             " scales' " + std::to_string(k.bytes));
    }
  }
  return Status::Ok();
}

Status CheckMemoryOverlap(const Layout& l) {
  std::vector<std::vector<int>> by_buffer(l.buffers.size());
  for (size_t i = 0; i < l.fragments.size(); ++i) {
    if (!l.fragments[i].box.Empty())
      by_buffer[l.fragments[i].loc.buffer].push_back(static_cast<int>(i));
  }
  for (size_t bi = 0; bi < by_buffer.size(); ++bi) {
    std::vector<int>& frags = by_buffer[bi];
    struct Span {
      int64_t begin, end;
      int fragment;
    };
    std::vector<Span> spans;
    spans.reserve(frags.size());
    for (int i : frags) {
      auto [offset, length] = l.FragmentSpan(l.fragments[i]);
      spans.push_back({offset, offset + length, i});
    }
    std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
      return x.begin != y.begin ? x.begin < y.begin : x.fragment < y.fragment;
    });
    for (size_t i = 0; i < spans.size(); ++i) {
      const StridedBytes si = ToStridedBytes(l, l.fragments[spans[i].fragment]);
      if (SelfOverlaps(si)) {
        return InvalidArgument(Describe(l, spans[i].fragment) +
                               ": its strides map two of its elements to the same bytes");
      }
      for (size_t j = i + 1; j < spans.size() && spans[j].begin < spans[i].end; ++j) {
        PairOverlap o = FragmentsOverlap(si, ToStridedBytes(l, l.fragments[spans[j].fragment]));
        if (o == PairOverlap::kNone) continue;
        int first = std::min(spans[i].fragment, spans[j].fragment);
        int second = std::max(spans[i].fragment, spans[j].fragment);
        return InvalidArgument(
            Describe(l, first) + " and " + Describe(l, second) + " overlap in memory on rank " +
            std::to_string(l.buffers[bi].rank) + " (byte spans [" + std::to_string(spans[i].begin) +
            ", " + std::to_string(spans[i].end) + ") and [" + std::to_string(spans[j].begin) +
            ", " + std::to_string(spans[j].end) + ")" +
            (o == PairOverlap::kConservative
                 ? "; checked conservatively: their strides do not nest, so overlapping spans "
                   "count as overlap)"
                 : ")"));
      }
    }
  }
  return Status::Ok();
}

// Finds a region of `region` (dims >= d still to sweep) covered by none of `boxes[idx]`; returns
// true and sets `hole` if one exists. Every box in idx spans `region` in dims < d.
bool FindHole(const std::vector<Box>& boxes, std::vector<int> idx, int d, Box region, Box& hole) {
  if (idx.empty()) {
    hole = region;
    return true;
  }
  const int ndim = region.ndim;
  std::vector<int64_t> xs = {region.lo[d], region.hi[d]};
  for (int i : idx) {
    for (int64_t x : {boxes[i].lo[d], boxes[i].hi[d]}) {
      if (x > region.lo[d] && x < region.hi[d]) xs.push_back(x);
    }
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return boxes[a].lo[d] < boxes[b].lo[d]; });
  std::vector<int> active;
  size_t next = 0;
  bool changed = true;
  for (size_t k = 0; k + 1 < xs.size(); ++k) {
    const int64_t x0 = xs[k], x1 = xs[k + 1];
    const size_t before = active.size();
    active.erase(
        std::remove_if(active.begin(), active.end(), [&](int i) { return boxes[i].hi[d] <= x0; }),
        active.end());
    if (active.size() != before) changed = true;
    while (next < idx.size() && boxes[idx[next]].lo[d] <= x0) {
      if (boxes[idx[next]].hi[d] > x0) {
        active.push_back(idx[next]);
        changed = true;
      }
      ++next;
    }
    Box slab = region;
    slab.lo[d] = x0;
    slab.hi[d] = x1;
    if (active.empty()) {
      hole = slab;
      return true;
    }
    if (d == ndim - 1 || !changed) continue;
    if (FindHole(boxes, active, d + 1, slab, hole)) return true;
    changed = false;
  }
  return false;
}

Status CheckCoverage(const Layout& l) {
  std::vector<std::vector<Box>> boxes(l.tensors.size());
  for (const Fragment& f : l.fragments) {
    if (!f.box.Empty()) boxes[f.tensor].push_back(f.box);
  }
  for (const PaddingRegion& p : l.padding) {
    Box clipped = p.box.Intersect(Box::FromShape(l.tensors[p.tensor].shape));
    if (!clipped.Empty()) boxes[p.tensor].push_back(clipped);
  }
  for (size_t t = 0; t < l.tensors.size(); ++t) {
    std::vector<Box>& bs = boxes[t];
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    const Box full = Box::FromShape(l.tensors[t].shape);
    if (std::find(bs.begin(), bs.end(), full) != bs.end()) continue;
    std::vector<int> idx(bs.size());
    for (size_t i = 0; i < bs.size(); ++i) idx[i] = static_cast<int>(i);
    Box hole;
    if (FindHole(bs, std::move(idx), 0, full, hole)) {
      std::set<int> ranks;
      for (const Fragment& f : l.fragments) {
        if (f.tensor == static_cast<int>(t)) ranks.insert(f.loc.rank);
      }
      return InvalidArgument("tensor '" + l.tensors[t].name + "' region " + hole.ToString() +
                             " is covered by no fragment and is not declared padding (fragments "
                             "on ranks " +
                             RankList(ranks) + ")");
    }
  }
  return Status::Ok();
}

std::map<int, std::set<int>> RanksByTensor(const Layout& l) {
  std::map<int, std::set<int>> ranks;
  for (const Fragment& f : l.fragments) ranks[f.tensor].insert(f.loc.rank);
  return ranks;
}

}  // namespace

Status ValidateLayout(const Layout& layout, const ValidateOptions& options) {
  FERRY_RETURN_IF_ERROR(CheckTensors(layout));
  FERRY_RETURN_IF_ERROR(CheckBuffers(layout, options));
  for (size_t i = 0; i < layout.fragments.size(); ++i) {
    FERRY_RETURN_IF_ERROR(CheckFragment(layout, i, options));
  }
  for (const PaddingRegion& p : layout.padding) {
    if (p.tensor < 0 || p.tensor >= static_cast<int>(layout.tensors.size())) {
      return InvalidArgument("padding region " + p.box.ToString() + " refers to tensor index " +
                             std::to_string(p.tensor) + " but the layout has " +
                             std::to_string(layout.tensors.size()) + " tensors");
    }
    const TensorSpec& t = layout.tensors[p.tensor];
    if (p.box.ndim != static_cast<int>(t.shape.size())) {
      return InvalidArgument("padding region " + p.box.ToString() + " of tensor '" + t.name +
                             "' does not match its shape " + FormatInts(t.shape));
    }
    for (int d = 0; d < p.box.ndim; ++d) {
      if (p.box.lo[d] < 0 || p.box.lo[d] > p.box.hi[d] || p.box.hi[d] > t.shape[d]) {
        return InvalidArgument("padding region " + p.box.ToString() +
                               " is out of bounds of tensor '" + t.name + "' shape " +
                               FormatInts(t.shape) + " in dim " + std::to_string(d));
      }
    }
  }
  for (const StoredTransform& t : layout.transforms) {
    if (t.tensor < 0 || t.tensor >= static_cast<int>(layout.tensors.size())) {
      return InvalidArgument("stored transform '" + t.transform + "' refers to tensor index " +
                             std::to_string(t.tensor) + " but the layout has " +
                             std::to_string(layout.tensors.size()) + " tensors");
    }
  }
  FERRY_RETURN_IF_ERROR(CheckBlockScaled(layout));
  FERRY_RETURN_IF_ERROR(CheckMemoryOverlap(layout));
  if (options.require_full_coverage) FERRY_RETURN_IF_ERROR(CheckCoverage(layout));
  return Status::Ok();
}

Status CheckCompatible(const Layout& source, const Layout& destination) {
  if (!TensorStacksAgree(source, destination)) {
    // One side names a family's members where the other has their stack: compare the members.
    FERRY_ASSIGN_OR_RETURN(const Layout source_members, UnstackTensors(source));
    FERRY_ASSIGN_OR_RETURN(const Layout destination_members, UnstackTensors(destination));
    return CheckCompatible(source_members, destination_members);
  }
  std::unordered_map<std::string, int> source_index;
  for (size_t i = 0; i < source.tensors.size(); ++i) {
    source_index.emplace(source.tensors[i].name, static_cast<int>(i));
  }
  // A block-scaled tensor's fp8 dtype is the quantization its layout asks for.
  const std::vector<char> quantized = BlockScaledTensorMask(destination);
  for (size_t d = 0; d < destination.tensors.size(); ++d) {
    const TensorSpec& dt = destination.tensors[d];
    auto it = source_index.find(dt.name);
    const bool missing = it == source_index.end();
    const TensorSpec* st = missing ? nullptr : &source.tensors[it->second];
    const bool shape_differs = st && st->shape != dt.shape;
    const bool dtype_differs = st && st->dtype != dt.dtype && !quantized[d];
    if (!missing && !shape_differs && !dtype_differs) continue;
    const std::string dst_ranks = RankList(RanksByTensor(destination)[static_cast<int>(d)]);
    if (missing) {
      return InvalidArgument("destination tensor '" + dt.name + "' " + FormatInts(dt.shape) +
                             " (on ranks " + dst_ranks + ") is not in the source layout");
    }
    const std::string src_ranks = RankList(RanksByTensor(source)[it->second]);
    if (shape_differs) {
      return InvalidArgument("tensor '" + dt.name + "' has shape " + FormatInts(st->shape) +
                             " in the source (on ranks " + src_ranks + ") but " +
                             FormatInts(dt.shape) + " in the destination (on ranks " + dst_ranks +
                             ")");
    }
    return InvalidArgument("tensor '" + dt.name + "' " + FormatInts(dt.shape) + " has dtype " +
                           std::string(DTypeName(st->dtype)) + " in the source (on ranks " +
                           src_ranks + ") but " + std::string(DTypeName(dt.dtype)) +
                           " in the destination (on ranks " + dst_ranks +
                           "); no conversion was asked for");
  }
  return Status::Ok();
}

}  // namespace ferry
