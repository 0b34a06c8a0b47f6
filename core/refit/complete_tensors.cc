// DestinationWriters: the ops of a rank that write each of its destination tensors, by byte span.
#include "core/refit/complete_tensors.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ferry {
namespace {

// One destination buffer of the rank: its fragments' spans sorted by start, with the longest.
struct BufferFragments {
  std::vector<std::pair<std::pair<int64_t, int64_t>, int>> spans;  // ([first, end), held index)
  int64_t longest = 0;
};

// The destination byte ranges op `op` writes: copy pairs into destination buffers, and the bytes
// a receive (or a Quantize's scales) puts into one.
std::vector<std::pair<int, std::pair<int64_t, int64_t>>> WrittenRanges(const TransferPlan& plan,
                                                                       const Op& op) {
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> out;
  for (int c = op.copies_begin; c < op.copies_end; ++c) {
    const CopyPair pair = plan.Copy(c);
    if (pair.to.space == Space::kDestination) {
      out.push_back({pair.to.buffer, {pair.to.offset, pair.to.offset + pair.to.SpanBytes()}});
    }
  }
  const bool lands = op.kind == OpKind::kRecv || op.kind == OpKind::kQuantize;
  if (op.data.space == Space::kDestination && lands) {
    // A Quantize's `bytes` are its values; its scales follow at data, of a size the plan does not
    // keep: their span runs to the buffer's end, a superset.
    const int64_t end = op.kind == OpKind::kRecv
                            ? op.data.offset + op.bytes
                            : plan.destination_buffers[static_cast<size_t>(op.data.buffer)].bytes;
    out.push_back({op.data.buffer, {op.data.offset, end}});
  }
  return out;
}

}  // namespace

DestinationWriters DestinationWriters::For(const TransferPlan& plan, const Layout& destination,
                                           int rank) {
  DestinationWriters w;
  std::map<int, int> held_index;  // tensor -> position in held_
  std::map<int, BufferFragments> buffers;
  const std::vector<DType> stored = StoredDTypes(destination);
  for (const Fragment& f : destination.fragments) {
    if (f.loc.rank != rank) continue;
    auto [it, added] = held_index.emplace(f.tensor, 0);
    if (added) w.held_.push_back(f.tensor);
    // Stored dtypes: a tensor stored transformed (Mamba's A as fp32) is wider than its own.
    const auto [offset, length] = destination.FragmentSpan(f, stored[static_cast<size_t>(f.tensor)]);
    BufferFragments& b = buffers[f.loc.buffer];
    b.spans.push_back({{offset, offset + length}, f.tensor});
    b.longest = std::max(b.longest, length);
  }
  std::sort(w.held_.begin(), w.held_.end());
  for (size_t i = 0; i < w.held_.size(); ++i) held_index[w.held_[i]] = static_cast<int>(i);
  for (auto& [buffer, b] : buffers) {
    for (auto& span : b.spans) span.second = held_index[span.second];
    std::sort(b.spans.begin(), b.spans.end());
  }
  w.writers_.resize(w.held_.size());
  for (int id : plan.OpsOfRank(rank)) {
    ++w.num_rank_ops_;
    for (const auto& [buffer, range] : WrittenRanges(plan, plan.ops[static_cast<size_t>(id)])) {
      const auto found = buffers.find(buffer);
      if (found == buffers.end()) continue;
      const BufferFragments& b = found->second;
      // Fragments starting at or after range.first - longest may reach into the range.
      auto it = std::lower_bound(b.spans.begin(), b.spans.end(),
                                 std::make_pair(std::make_pair(range.first - b.longest, int64_t{0}), -1));
      for (; it != b.spans.end() && it->first.first < range.second; ++it) {
        if (it->first.second <= range.first) continue;
        std::vector<int>& ops = w.writers_[static_cast<size_t>(it->second)];
        if (ops.empty() || ops.back() != id) ops.push_back(id);
      }
    }
  }
  return w;
}

std::vector<int> DestinationWriters::Complete(const std::vector<int>& completed_ops) const {
  std::vector<int> done = completed_ops;
  std::sort(done.begin(), done.end());
  const bool all_ops = static_cast<int>(done.size()) >= num_rank_ops_;
  std::vector<int> complete;
  for (size_t i = 0; i < held_.size(); ++i) {
    const std::vector<int>& ops = writers_[i];
    const bool whole = ops.empty() ? all_ops
                                   : std::all_of(ops.begin(), ops.end(), [&](int op) {
                                       return std::binary_search(done.begin(), done.end(), op);
                                     });
    if (whole) complete.push_back(held_[i]);
  }
  return complete;
}

}  // namespace ferry
