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

int TransferPlan::AddOp(Op op) {
  op.id = static_cast<int>(ops.size());
  ops.push_back(std::move(op));
  return ops.back().id;
}

int TransferPlan::AddOp(Op op, const std::vector<int>& deps, const std::vector<CopyPair>& copies) {
  const int id = AddOp(std::move(op));
  SetDeps(id, deps);
  SetCopies(id, copies);
  return id;
}

void TransferPlan::SetDeps(int id, const std::vector<int>& deps) {
  Op& op = ops[id];
  op.deps_begin = static_cast<int>(dep_list.size());
  dep_list.insert(dep_list.end(), deps.begin(), deps.end());
  op.deps_end = static_cast<int>(dep_list.size());
}

void TransferPlan::SetCopies(int id, const std::vector<CopyPair>& copies) {
  Op& op = ops[id];
  op.copies_begin = static_cast<int>(copy_list.size());
  copy_list.insert(copy_list.end(), copies.begin(), copies.end());
  op.copies_end = static_cast<int>(copy_list.size());
}

int TransferPlan::AddSlot(int rank, int64_t bytes) {
  slots.push_back({rank, bytes});
  return static_cast<int>(slots.size()) - 1;
}

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
    if (op.kind == OpKind::kSend || op.kind == OpKind::kForward) senders.push_back({op.message, op.id});
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
