// TransferPlan basics: names, region geometry, op and slot bookkeeping, message matching.
#include "core/plan/plan.h"

#include <algorithm>

namespace ferry {

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kCopy: return "copy";
    case OpKind::kPack: return "pack";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kUnpack: return "unpack";
    case OpKind::kConvert: return "convert";
    case OpKind::kForward: return "forward";
    case OpKind::kQuantize: return "quantize";
  }
  return "unknown";
}

std::string_view SpaceName(Space space) {
  switch (space) {
    case Space::kSource: return "source";
    case Space::kDestination: return "destination";
    case Space::kStaging: return "staging";
  }
  return "unknown";
}

int64_t Region::NumElements() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

int64_t Region::SpanBytes() const {
  const int64_t esize = DTypeSize(dtype);
  int64_t last = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d] * esize;
  }
  return last + esize;
}

bool Region::IsContiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

Region Region::Bytes(Space space, int buffer, int64_t offset, int64_t bytes) {
  Region r;
  r.space = space;
  r.buffer = buffer;
  r.offset = offset;
  r.dtype = DType::kUInt8;
  r.ndim = 1;
  r.shape[0] = bytes;
  r.strides[0] = 1;
  return r;
}

BufferTable::BufferTable(const BufferList& buffers) : num_ranks_(buffers.NumRanks()) {
  entries_.reserve(buffers.size());
  for (const BufferSpec& b : buffers) entries_.push_back({b.rank, b.bytes});
}

BufferTable::BufferTable(std::initializer_list<BufferSpec> buffers) {
  entries_.reserve(buffers.size());
  for (const BufferSpec& b : buffers) push_back(b);
}

void BufferTable::push_back(const BufferSpec& buffer) {
  entries_.push_back({buffer.rank, buffer.bytes});
  num_ranks_ = std::max(num_ranks_, buffer.rank + 1);
}

int TransferPlan::AddOp(Op op, const std::vector<int>& deps, const std::vector<CopyPair>& pairs) {
  const int id = AddOp(op);
  SetDeps(id, deps);
  SetCopies(id, pairs);
  return id;
}

void TransferPlan::SetDeps(int id, const std::vector<int>& deps) {
  Op& op = ops[id];
  op.deps_begin = static_cast<int>(dep_list.size());
  dep_list.insert(dep_list.end(), deps.begin(), deps.end());
  op.deps_end = static_cast<int>(dep_list.size());
}

void TransferPlan::SetCopies(int id, const std::vector<CopyPair>& pairs) {
  const int begin = static_cast<int>(copies.size());
  for (const CopyPair& c : pairs) AppendCopy(c.from, c.to, c.fn);
  ops[id].copies_begin = begin;
  ops[id].copies_end = static_cast<int>(copies.size());
}

namespace {

// True when `r`'s strides are the row-major strides of its shape, as a dense side stores them.
bool HasDenseStrides(const Region& r, int ndim) {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (r.strides[d] != stride) return false;
    stride *= std::max<int64_t>(1, r.shape[d]);
  }
  return true;
}

void SetDenseStrides(Region& r, int ndim) {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    r.strides[d] = stride;
    stride *= std::max<int64_t>(1, r.shape[d]);
  }
}

// Number of stored dims of a region with `ndim` dims.
int StoredDims(int ndim) { return std::clamp(ndim, 0, kMaxDims); }

}  // namespace

void TransferPlan::AppendCopy(const Region& from, const Region& to, ElementFn element_fn) {
  PairGeometry g;
  g.fn = element_fn;
  g.from_space = from.space;
  g.to_space = to.space;
  g.from_dtype = from.dtype;
  g.to_dtype = to.dtype;
  g.from_ndim = static_cast<int8_t>(std::clamp(from.ndim, -1, kMaxDims + 1));
  g.to_ndim = static_cast<int8_t>(std::clamp(to.ndim, -1, kMaxDims + 1));
  const int fn = StoredDims(from.ndim), tn = StoredDims(to.ndim);
  bool shared = fn == tn;
  for (int d = 0; shared && d < fn; ++d) shared = from.shape[d] == to.shape[d];
  const bool from_dense = HasDenseStrides(from, fn), to_dense = HasDenseStrides(to, tn);
  g.flags = static_cast<uint8_t>((shared ? PairGeometry::kSharedShape : 0) |
                                 (from_dense ? PairGeometry::kFromDense : 0) |
                                 (to_dense ? PairGeometry::kToDense : 0));
  int64_t record[1 + 4 * kMaxDims];
  int64_t* out = record;
  *out++ = g.Header();
  out = std::copy(from.shape.begin(), from.shape.begin() + fn, out);
  if (!shared) out = std::copy(to.shape.begin(), to.shape.begin() + tn, out);
  if (!from_dense) out = std::copy(from.strides.begin(), from.strides.begin() + fn, out);
  if (!to_dense) out = std::copy(to.strides.begin(), to.strides.begin() + tn, out);
  copies.push_back({from.offset, to.offset, InternGeometry(record, static_cast<size_t>(out - record)),
                    from.buffer, to.buffer});
}

int64_t TransferPlan::InternGeometry(const int64_t* values, size_t length) {
  uint64_t hash = 0;
  for (size_t i = 0; i < length; ++i) hash = MixGeometryHash(hash, values[i]);
  int64_t& entry = GeometrySlot(hash);
  if (entry >= 0 && static_cast<size_t>(entry) + length <= copy_dims.size() &&
      std::equal(values, values + length, copy_dims.begin() + entry)) {
    return entry;
  }
  entry = static_cast<int64_t>(copy_dims.size());
  copy_dims.insert(copy_dims.end(), values, values + length);
  return entry;
}

CopyPair TransferPlan::Copy(int index) const {
  const PackedCopy& p = copies[index];
  const int64_t* dims = copy_dims.data() + p.geometry;
  const PairGeometry g = PairGeometry::FromHeader(*dims++);
  CopyPair c;
  c.fn = g.fn;
  c.from.space = g.from_space;
  c.from.buffer = p.from_buffer;
  c.from.offset = p.from_offset;
  c.from.dtype = g.from_dtype;
  c.from.ndim = g.from_ndim;
  c.to.space = g.to_space;
  c.to.buffer = p.to_buffer;
  c.to.offset = p.to_offset;
  c.to.dtype = g.to_dtype;
  c.to.ndim = g.to_ndim;
  const int fn = StoredDims(g.from_ndim), tn = StoredDims(g.to_ndim);
  std::copy(dims, dims + fn, c.from.shape.begin());
  dims += fn;
  if (g.flags & PairGeometry::kSharedShape) {
    std::copy(c.from.shape.begin(), c.from.shape.begin() + tn, c.to.shape.begin());
  } else {
    std::copy(dims, dims + tn, c.to.shape.begin());
    dims += tn;
  }
  if (g.flags & PairGeometry::kFromDense) {
    SetDenseStrides(c.from, fn);
  } else {
    std::copy(dims, dims + fn, c.from.strides.begin());
    dims += fn;
  }
  if (g.flags & PairGeometry::kToDense) {
    SetDenseStrides(c.to, tn);
  } else {
    std::copy(dims, dims + tn, c.to.strides.begin());
  }
  return c;
}

CopyPair CopyRange::Iterator::operator*() const { return plan_->Copy(index_); }

CopyPair CopyRange::operator[](int i) const { return plan_->Copy(begin_ + i); }

std::vector<int> TransferPlan::OpsOfRank(int rank) const {
  std::vector<int> ids;
  for (const Op& op : ops) {
    if (op.rank == rank) ids.push_back(op.id);
  }
  return ids;
}

std::vector<std::pair<int, int>> TransferPlan::MatchedMessages() const {
  std::vector<std::pair<int64_t, int>> senders, receivers;
  for (const Op& op : ops) {
    if (IsSenderKind(op.kind)) senders.push_back({op.message, op.id});
    if (op.kind == OpKind::kRecv) receivers.push_back({op.message, op.id});
  }
  std::sort(senders.begin(), senders.end());
  std::sort(receivers.begin(), receivers.end());
  std::vector<std::pair<int, int>> matched;
  matched.reserve(std::min(senders.size(), receivers.size()));
  size_t j = 0;
  for (const auto& [message, id] : senders) {
    while (j < receivers.size() && receivers[j].first < message) ++j;
    if (j < receivers.size() && receivers[j].first == message) matched.push_back({id, receivers[j].second});
  }
  return matched;
}

}  // namespace ferry
