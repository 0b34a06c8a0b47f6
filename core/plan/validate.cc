// ValidatePlan and the region-to-byte-run helper.
#include "core/plan/validate.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ferry {
namespace {

std::string OpName(const Op& op) {
  return std::string(OpKindName(op.kind)) + " op " + std::to_string(op.id) + " on rank " +
         std::to_string(op.rank);
}

struct BufferInfo {
  int rank = 0;
  int64_t bytes = 0;
};

Status CheckRegion(const TransferPlan& plan, const Op& op, const Region& r, const char* what) {
  const BufferTable* buffers = nullptr;
  BufferInfo info;
  switch (r.space) {
    case Space::kSource: buffers = &plan.source_buffers; break;
    case Space::kDestination: buffers = &plan.destination_buffers; break;
    case Space::kStaging: break;
  }
  if (buffers != nullptr) {
    if (r.buffer < 0 || r.buffer >= static_cast<int>(buffers->size())) {
      return InvalidArgument(OpName(op) + ": " + what + " names " + std::string(SpaceName(r.space)) +
                             " buffer " + std::to_string(r.buffer) + " which does not exist");
    }
    info = {(*buffers)[r.buffer].rank, (*buffers)[r.buffer].bytes};
  } else {
    if (r.buffer < 0 || r.buffer >= static_cast<int>(plan.slots.size())) {
      return InvalidArgument(OpName(op) + ": " + what + " names staging slot " +
                             std::to_string(r.buffer) + " which does not exist");
    }
    info = {plan.slots[r.buffer].rank, plan.slots[r.buffer].bytes};
  }
  if (info.rank != op.rank) {
    return InvalidArgument(OpName(op) + ": " + what + " is in a " + std::string(SpaceName(r.space)) +
                           " buffer of rank " + std::to_string(info.rank));
  }
  if (r.ndim < 1 || r.ndim > kMaxDims) {
    return InvalidArgument(OpName(op) + ": " + what + " has " + std::to_string(r.ndim) + " dims");
  }
  int64_t last = 0;
  for (int d = 0; d < r.ndim; ++d) {
    if (r.shape[d] < 0 || r.strides[d] <= 0) {
      return InvalidArgument(OpName(op) + ": " + what + " has a negative extent or stride <= 0");
    }
    if (r.shape[d] == 0) return Status::Ok();
    last += (r.shape[d] - 1) * r.strides[d];
  }
  int64_t end = r.offset + (last + 1) * DTypeSize(r.dtype);
  if (r.offset < 0 || end > info.bytes) {
    return InvalidArgument(OpName(op) + ": " + what + " spans bytes [" + std::to_string(r.offset) +
                           ", " + std::to_string(end) + ") outside its " +
                           std::string(SpaceName(r.space)) + " buffer of " +
                           std::to_string(info.bytes) + " bytes");
  }
  return Status::Ok();
}

struct BufferRun {
  int buffer = 0;
  int64_t offset = 0;
  int64_t length = 0;
  int op = -1;  // writer, -1 for expected runs
};

void AppendBufferRuns(const Region& region, int op, std::vector<BufferRun>& out,
                      std::vector<ByteRun>& scratch) {
  scratch.clear();
  AppendRegionRuns(region, scratch);
  for (const ByteRun& r : scratch) out.push_back({region.buffer, r.offset, r.length, op});
}

// Sorts runs; reports the first overlap (a byte written twice) when `overlap_is_error`, and merges
// touching runs.
Status SortAndMerge(std::vector<BufferRun>& runs, bool overlap_is_error,
                    const Layout& destination) {
  std::sort(runs.begin(), runs.end(), [](const BufferRun& a, const BufferRun& b) {
    if (a.buffer != b.buffer) return a.buffer < b.buffer;
    return a.offset < b.offset;
  });
  std::vector<BufferRun> merged;
  merged.reserve(runs.size());
  for (const BufferRun& r : runs) {
    if (!merged.empty() && merged.back().buffer == r.buffer &&
        merged.back().offset + merged.back().length >= r.offset) {
      BufferRun& m = merged.back();
      if (overlap_is_error && m.offset + m.length > r.offset) {
        const BufferSpec& b = destination.buffers[r.buffer];
        return InvalidArgument("destination buffer '" + b.name + "' on rank " +
                               std::to_string(b.rank) + ": byte " + std::to_string(r.offset) +
                               " is written twice (ops " + std::to_string(m.op) + " and " +
                               std::to_string(r.op) + ")");
      }
      m.length = std::max(m.offset + m.length, r.offset + r.length) - m.offset;
      m.op = r.op;
      continue;
    }
    merged.push_back(r);
  }
  runs.swap(merged);
  return Status::Ok();
}

}  // namespace

void AppendRegionRuns(const Region& region, std::vector<ByteRun>& runs) {
  // Keep dims with extent > 1; an extent of 0 means no bytes.
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  int n = 0;
  for (int d = 0; d < region.ndim; ++d) {
    if (region.shape[d] == 0) return;
    if (region.shape[d] == 1) continue;
    shape[n] = region.shape[d];
    strides[n] = region.strides[d];
    ++n;
  }
  const int64_t esize = DTypeSize(region.dtype);
  // Merge the innermost dims that are dense into one run.
  int64_t run_elems = 1;
  int outer = n;
  while (outer > 0 && strides[outer - 1] == run_elems) {
    run_elems *= shape[outer - 1];
    --outer;
  }
  const int64_t run_bytes = run_elems * esize;
  int64_t index[kMaxDims] = {};
  while (true) {
    int64_t off = region.offset;
    for (int d = 0; d < outer; ++d) off += index[d] * strides[d] * esize;
    if (!runs.empty() && runs.back().offset + runs.back().length == off) {
      runs.back().length += run_bytes;
    } else {
      runs.push_back({off, run_bytes});
    }
    int d = outer - 1;
    while (d >= 0 && ++index[d] == shape[d]) index[d--] = 0;
    if (d < 0) break;
  }
}

namespace {

// Every buffer and staging slot of the plan lies on a rank of the plan.
Status CheckBufferTables(const TransferPlan& plan, const Layout& source, const Layout& destination) {
  const int n = plan.num_ranks;
  if (plan.source_buffers.size() != source.buffers.size() ||
      plan.destination_buffers.size() != destination.buffers.size()) {
    return InvalidArgument("plan buffer tables do not match the layouts (" +
                           std::to_string(plan.source_buffers.size()) + " source and " +
                           std::to_string(plan.destination_buffers.size()) +
                           " destination buffers in the plan, " +
                           std::to_string(source.buffers.size()) + " and " +
                           std::to_string(destination.buffers.size()) + " in the layouts)");
  }
  for (size_t i = 0; i < plan.source_buffers.size(); ++i) {
    const BufferTable::Entry& b = plan.source_buffers[i];
    if (b.rank < 0 || b.rank >= n) {
      return InvalidArgument("source buffer '" + source.buffers[i].name + "' is on rank " + std::to_string(b.rank) +
                             " outside [0, " + std::to_string(n) + ")");
    }
  }
  for (size_t i = 0; i < plan.destination_buffers.size(); ++i) {
    const BufferTable::Entry& b = plan.destination_buffers[i];
    if (b.rank < 0 || b.rank >= n) {
      return InvalidArgument("destination buffer '" + destination.buffers[i].name + "' is on rank " +
                             std::to_string(b.rank) + " outside [0, " + std::to_string(n) + ")");
    }
  }
  for (size_t s = 0; s < plan.slots.size(); ++s) {
    if (plan.slots[s].rank < 0 || plan.slots[s].rank >= n || plan.slots[s].bytes < 0) {
      return InvalidArgument("staging slot " + std::to_string(s) + " has rank " +
                             std::to_string(plan.slots[s].rank) + " or a negative size");
    }
  }
  return Status::Ok();
}

// Op i's id, rank, dependency and copy ranges, and its dependencies (same rank, existing ops).
Status CheckOpStructure(const TransferPlan& plan, int i) {
  const Op& op = plan.ops[i];
  const int n = plan.num_ranks;
  const int num_ops = static_cast<int>(plan.ops.size());
  if (op.id != i) return InvalidArgument("op at index " + std::to_string(i) + " has id " + std::to_string(op.id));
  if (op.rank < 0 || op.rank >= n) {
    return InvalidArgument(OpName(op) + ": rank outside [0, " + std::to_string(n) + ")");
  }
  if (op.deps_begin < 0 || op.deps_begin > op.deps_end || op.deps_end > static_cast<int>(plan.dep_list.size())) {
    return InvalidArgument(OpName(op) + ": deps range [" + std::to_string(op.deps_begin) + ", " +
                           std::to_string(op.deps_end) + ") is outside the plan's dep list (" +
                           std::to_string(plan.dep_list.size()) + ")");
  }
  if (op.copies_begin < 0 || op.copies_begin > op.copies_end ||
      op.copies_end > static_cast<int>(plan.copies.size())) {
    return InvalidArgument(OpName(op) + ": copies range [" + std::to_string(op.copies_begin) + ", " +
                           std::to_string(op.copies_end) + ") is outside the plan's copy list (" +
                           std::to_string(plan.copies.size()) + ")");
  }
  for (int dep : plan.Deps(op)) {
    if (dep < 0 || dep >= num_ops || dep == i) {
      return InvalidArgument(OpName(op) + ": dependency " + std::to_string(dep) + " is not an op");
    }
    if (plan.ops[dep].rank != op.rank) {
      return InvalidArgument(OpName(op) + ": depends on op " + std::to_string(dep) + " of another rank (" +
                             std::to_string(plan.ops[dep].rank) + ")");
    }
  }
  return Status::Ok();
}

// A Copy, Pack, Unpack or Convert: regions in bounds, element counts and sizes agree, no writes
// into source buffers.
Status CheckCopies(const TransferPlan& plan, const Op& op) {
  for (const CopyPair& c : plan.Copies(op)) {
    FERRY_RETURN_IF_ERROR(CheckRegion(plan, op, c.from, "copy source"));
    FERRY_RETURN_IF_ERROR(CheckRegion(plan, op, c.to, "copy target"));
    if (c.from.NumElements() != c.to.NumElements()) {
      return InvalidArgument(OpName(op) + ": copy of " + std::to_string(c.from.NumElements()) +
                             " elements into " + std::to_string(c.to.NumElements()));
    }
    if (op.kind != OpKind::kConvert && op.kind != OpKind::kQuantize &&
        DTypeSize(c.from.dtype) != DTypeSize(c.to.dtype)) {
      return InvalidArgument(OpName(op) + ": copy changes the element size; use Convert");
    }
    if (c.fn != ElementFn::kNone &&
        (op.kind != OpKind::kConvert || !ElementFnApplies(c.fn, c.from.dtype, c.to.dtype))) {
      return InvalidArgument(OpName(op) + ": copy applies " + std::string(ElementFnName(c.fn)) +
                             " from " + std::string(DTypeName(c.from.dtype)) + " to " +
                             std::string(DTypeName(c.to.dtype)) +
                             "; element functions run in Convert ops, neg_exp from bf16, fp16 or "
                             "fp32 into fp32");
    }
    if (c.to.space == Space::kSource) return InvalidArgument(OpName(op) + ": writes into a source buffer");
  }
  return Status::Ok();
}

// A Quantize: one pair of equal dense 2- or 3-dim shapes, a float to e4m3fn, and its scales in
// bounds of a destination buffer.
Status CheckQuantize(const TransferPlan& plan, const Op& op) {
  if (op.NumCopies() != 1) return InvalidArgument(OpName(op) + ": quantizes one region, not " + std::to_string(op.NumCopies()));
  const CopyPair c = plan.Copy(op.copies_begin);
  const QuantizeShape q = QuantizeShapeOf(c.from);
  bool same = c.from.ndim == c.to.ndim && q.matrices > 0;
  for (int d = 0; same && d < c.from.ndim; ++d) same = c.from.shape[d] == c.to.shape[d];
  const bool wide = c.from.dtype == DType::kBF16 || c.from.dtype == DType::kFP16 || c.from.dtype == DType::kFP32;
  if (!same || !wide || c.to.dtype != DType::kFP8E4M3 || !c.from.IsContiguous() || !c.to.IsContiguous()) {
    return InvalidArgument(OpName(op) + ": quantizes dense [matrices,] rows x cols of bf16, fp16 or fp32 into "
                           "fp8_e4m3 of the same shape");
  }
  if (op.data.space != Space::kDestination) return InvalidArgument(OpName(op) + ": scales outside a destination buffer");
  return CheckRegion(plan, op, QuantizeScales(op, c.from), "scales");
}

// A Send, Forward or Recv: a valid peer (itself too: planner.same_rank=transport sends a rank's
// own bytes through its same-rank transport) and message id, data in bounds; a Forward relays bytes a
// Recv it depends on received, as they landed (in a staging slot or in the destination region
// they are for); a Recv does not write into a source buffer.
Status CheckMessageOp(const TransferPlan& plan, const Op& op) {
  if (op.peer < 0 || op.peer >= plan.num_ranks) {
    return InvalidArgument(OpName(op) + ": peer " + std::to_string(op.peer) + " is invalid");
  }
  if (op.message < 0) {
    return InvalidArgument(OpName(op) + ": message id " + std::to_string(op.message) + " is negative");
  }
  FERRY_RETURN_IF_ERROR(CheckRegion(plan, op, op.Data(), "message data"));
  if (op.kind == OpKind::kForward) {
    bool relays_a_recv = false;
    for (int dep : plan.Deps(op)) {
      const Op& recv = plan.ops[dep];
      relays_a_recv = relays_a_recv || (recv.kind == OpKind::kRecv && recv.data.space == op.data.space &&
                                        recv.data.buffer == op.data.buffer && recv.data.offset == op.data.offset &&
                                        recv.bytes == op.bytes);
    }
    if (!relays_a_recv) return InvalidArgument(OpName(op) + ": forwards bytes that no Recv it depends on received");
  }
  if (op.kind == OpKind::kRecv && op.data.space == Space::kSource) {
    return InvalidArgument(OpName(op) + ": receives into a source buffer");
  }
  return Status::Ok();
}


// Each message has exactly one Send/Forward and one Recv that agree on ranks and size; adds the
// message's edge (sender -> receiver) to `successors` and `indegree`.
Status MatchMessages(const TransferPlan& plan, std::vector<std::vector<int>>& successors,
                     std::vector<int>& indegree) {
  struct Endpoint {
    int64_t message;
    int op;
    bool is_recv;
  };
  std::vector<Endpoint> endpoints;
  for (const Op& op : plan.ops) {
    if (IsMessageKind(op.kind)) endpoints.push_back({op.message, op.id, op.kind == OpKind::kRecv});
  }
  std::sort(endpoints.begin(), endpoints.end(), [](const Endpoint& a, const Endpoint& b) {
    if (a.message != b.message) return a.message < b.message;
    if (a.is_recv != b.is_recv) return a.is_recv < b.is_recv;
    return a.op < b.op;
  });
  for (size_t i = 0; i < endpoints.size();) {
    size_t j = i;
    while (j < endpoints.size() && endpoints[j].message == endpoints[i].message) ++j;
    const int64_t message = endpoints[i].message;
    if (j - i != 2 || endpoints[i].is_recv || !endpoints[i + 1].is_recv) {
      return InvalidArgument("message " + std::to_string(message) + " has " + std::to_string(j - i) +
                             " endpoints; it needs exactly one Send/Forward and one Recv");
    }
    const Op& send = plan.ops[endpoints[i].op];
    const Op& recv = plan.ops[endpoints[i + 1].op];
    if (send.peer != recv.rank || recv.peer != send.rank) {
      return InvalidArgument("message " + std::to_string(message) + ": " + OpName(send) + " targets rank " +
                             std::to_string(send.peer) + " but " + OpName(recv) + " expects it from rank " +
                             std::to_string(recv.peer));
    }
    if (send.bytes != recv.bytes) {
      return InvalidArgument("message " + std::to_string(message) + ": sends " + std::to_string(send.bytes) +
                             " bytes, receives " + std::to_string(recv.bytes));
    }
    successors[send.id].push_back(recv.id);
    ++indegree[recv.id];
    i = j;
  }
  return Status::Ok();
}

// No cycle through dependencies and messages (Kahn's algorithm over both kinds of edge).
Status CheckAcyclic(const TransferPlan& plan) {
  const int num_ops = static_cast<int>(plan.ops.size());
  std::vector<std::vector<int>> successors(num_ops);
  std::vector<int> indegree(num_ops, 0);
  FERRY_RETURN_IF_ERROR(MatchMessages(plan, successors, indegree));
  for (const Op& op : plan.ops) {
    indegree[op.id] += op.NumDeps();
    for (int dep : plan.Deps(op)) successors[dep].push_back(op.id);
  }
  std::vector<int> ready;
  for (int i = 0; i < num_ops; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  int visited = 0;
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    ++visited;
    for (int s : successors[i]) {
      if (--indegree[s] == 0) ready.push_back(s);
    }
  }
  if (visited != num_ops) {
    return InvalidArgument("the plan has a dependency cycle (" + std::to_string(num_ops - visited) +
                           " ops never become ready)");
  }
  return Status::Ok();
}

// The destination bytes the plan writes (Recvs and copies into destination buffers), merged;
// bytes written twice are an error.
Result<std::vector<BufferRun>> WrittenRuns(const TransferPlan& plan, const Layout& destination) {
  std::vector<BufferRun> written;
  std::vector<ByteRun> scratch;
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kRecv) {
      if (op.data.space == Space::kDestination) AppendBufferRuns(op.Data(), op.id, written, scratch);
      continue;
    }
    for (const CopyPair& c : plan.Copies(op)) {
      if (c.to.space == Space::kDestination) AppendBufferRuns(c.to, op.id, written, scratch);
    }
    if (op.kind == OpKind::kQuantize && op.NumCopies() == 1) {
      AppendBufferRuns(QuantizeScales(op, plan.Copy(op.copies_begin).from), op.id, written, scratch);
    }
  }
  FERRY_RETURN_IF_ERROR(SortAndMerge(written, /*overlap_is_error=*/true, destination));
  return written;
}

// The bytes of every destination fragment, merged.
Result<std::vector<BufferRun>> ExpectedRuns(const Layout& destination) {
  std::vector<BufferRun> expected;
  std::vector<ByteRun> scratch;
  const std::vector<DType> stored = StoredDTypes(destination);
  for (const Fragment& f : destination.fragments) {
    Region r;
    r.space = Space::kDestination;
    r.buffer = f.loc.buffer;
    r.offset = f.loc.byte_offset;
    r.dtype = stored[static_cast<size_t>(f.tensor)];
    r.ndim = f.box.ndim;
    for (int d = 0; d < f.box.ndim; ++d) {
      r.shape[d] = f.box.Extent(d);
      r.strides[d] = f.loc.strides[d];
    }
    AppendBufferRuns(r, -1, expected, scratch);
  }
  for (const BlockScaledBuffer& s : destination.block_scaled) {  // scales are written whole
    const int64_t bytes = destination.buffers[static_cast<size_t>(s.scales)].bytes;
    AppendBufferRuns(Region::Bytes(Space::kDestination, s.scales, 0, bytes), -1, expected, scratch);
  }
  FERRY_RETURN_IF_ERROR(SortAndMerge(expected, /*overlap_is_error=*/false, destination));
  return expected;
}

// Every destination fragment's bytes are written exactly once and nothing else is written.
Status CheckDestinationWrittenOnce(const TransferPlan& plan, const Layout& destination) {
  FERRY_ASSIGN_OR_RETURN(std::vector<BufferRun> written, WrittenRuns(plan, destination));
  FERRY_ASSIGN_OR_RETURN(std::vector<BufferRun> expected, ExpectedRuns(destination));
  auto before = [](const BufferRun& x, const BufferRun& y) {
    return x.buffer < y.buffer || (x.buffer == y.buffer && x.offset < y.offset);
  };
  for (size_t i = 0; i < std::max(written.size(), expected.size()); ++i) {
    const bool has_w = i < written.size();
    const bool has_e = i < expected.size();
    if (has_w && has_e && written[i].buffer == expected[i].buffer && written[i].offset == expected[i].offset &&
        written[i].length == expected[i].length) {
      continue;
    }
    if (has_e && (!has_w || before(expected[i], written[i]) ||
                  (written[i].buffer == expected[i].buffer && written[i].offset == expected[i].offset &&
                   written[i].length < expected[i].length))) {
      const BufferRun& e = expected[i];
      const BufferSpec& b = destination.buffers[e.buffer];
      int64_t gap = has_w && written[i].buffer == e.buffer && written[i].offset == e.offset
                        ? e.offset + written[i].length
                        : e.offset;
      return InvalidArgument("destination buffer '" + b.name + "' on rank " + std::to_string(b.rank) + ": byte " +
                             std::to_string(gap) + " of a destination fragment is never written");
    }
    const BufferRun& w = written[i];
    const BufferSpec& b = destination.buffers[w.buffer];
    int64_t stray = has_e && expected[i].buffer == w.buffer && expected[i].offset == w.offset
                        ? w.offset + expected[i].length
                        : w.offset;
    return InvalidArgument("destination buffer '" + b.name + "' on rank " + std::to_string(b.rank) + ": byte " +
                           std::to_string(stray) + " is written by op " + std::to_string(w.op) +
                           " but belongs to no destination fragment");
  }
  return Status::Ok();
}

}  // namespace

Status ValidatePlan(const TransferPlan& plan, const Layout& source, const Layout& destination) {
  FERRY_RETURN_IF_ERROR(CheckBufferTables(plan, source, destination));
  for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) {
    FERRY_RETURN_IF_ERROR(CheckOpStructure(plan, i));
    const Op& op = plan.ops[i];
    FERRY_RETURN_IF_ERROR(IsMessageKind(op.kind) ? CheckMessageOp(plan, op) : CheckCopies(plan, op));
    if (op.kind == OpKind::kQuantize) FERRY_RETURN_IF_ERROR(CheckQuantize(plan, op));
  }
  FERRY_RETURN_IF_ERROR(CheckAcyclic(plan));
  return CheckDestinationWrittenOnce(plan, destination);
}

}  // namespace ferry
