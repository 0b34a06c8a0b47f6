// Copy slowdowns of host-memory ranks' ops from the row patterns and conversions of their copies,
// and of their Quantize ops from the quantizer's rate.
#include "tools/sim/host_copy_rates.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

namespace ferry::sim {
namespace {

// Bytes and seconds of a set of copies at the table's rates.
struct CopyCost {
  double bytes = 0;
  double seconds = 0;

  void Add(const CopyCost& other) {
    bytes += other.bytes;
    seconds += other.seconds;
  }
  // seconds over the time of the bytes at `contiguous` bytes/s, at least 1.
  double Slowdown(double contiguous) const {
    return bytes > 0 ? std::max(1.0, seconds * contiguous / bytes) : 1.0;
  }
};

// A pair's bytes (those it writes) and seconds: a Quantize op's pair (`quantize_rate` > 0: its
// values into e4m3, planner/block_quantize.h) its values' bytes at that rate; a pair that converts
// a dtype pair `converts` lists, its source bytes at that rate; any other its rows at the row
// table's rate.
CopyCost CostOf(const CopyPair& pair, std::span<const RowRate> table, std::span<const ConvertRate> converts,
                double quantize_rate) {
  Result<CopyGeometry> g = MakeCopyGeometry(pair.from, pair.to, pair.fn);
  if (!g.ok() || g->bytes() == 0) return {};  // a bad pair fails in the executor, not here
  const double bytes = static_cast<double>(g->bytes());
  const double read = static_cast<double>(g->rows * g->run * DTypeSize(g->from_dtype));
  if (quantize_rate > 0) return {bytes, read / quantize_rate};
  if (g->from_dtype != g->to_dtype) {
    if (const double rate = ConvertRateOf(converts, g->from_dtype, g->to_dtype); rate > 0) {
      return {bytes, read / rate};
    }
  }
  const RowPattern p = RowPatternOf(*g);
  return {bytes, bytes / RowRateAt(table, p.row_bytes, p.pitch_bytes)};
}

bool CopiesOnItsRank(OpKind kind) {
  return kind == OpKind::kCopy || kind == OpKind::kPack || kind == OpKind::kUnpack ||
         kind == OpKind::kConvert;
}

}  // namespace

RowPattern RowPatternOf(const CopyGeometry& g) {
  const int64_t element = DTypeSize(g.from_dtype);
  if (g.run > 1 && g.from_inner != element) return {element, std::abs(g.from_inner)};
  const int64_t row = g.run * element;
  const int64_t pitch = g.outer_dims > 0 ? std::abs(g.from_stride[g.outer_dims - 1]) : row;
  return {row, std::max(pitch, row)};
}

std::vector<double> HostCopySlowdowns(const TransferPlan& plan, const ClusterSpec& cluster,
                                      std::span<const DirectRead> direct_reads) {
  const std::span<const RowRate> table = cluster.host_copy_row_rates;
  if (!cluster.host_memory_ranks || table.empty()) return {};
  const double contiguous = ContiguousRate(table);
  std::vector<double> slowdowns(plan.ops.size(), 1.0);
  std::unordered_map<int64_t, CopyCost> by_geometry;  // a pair's cost depends on its record only
  for (const Op& op : plan.ops) {
    const double quantize_rate = op.kind == OpKind::kQuantize ? cluster.host_quantize_rate : 0;
    if (quantize_rate == 0 && !CopiesOnItsRank(op.kind)) continue;
    CopyCost cost;
    for (int i = op.copies_begin; i < op.copies_end; ++i) {
      if (quantize_rate > 0) {  // one pair an op, whose record a Convert's may share: not cached
        cost.Add(CostOf(plan.Copy(i), table, {}, quantize_rate));
        continue;
      }
      const int64_t record = plan.copies[static_cast<size_t>(i)].geometry;
      auto [it, added] = by_geometry.try_emplace(record);
      if (added) it->second = CostOf(plan.Copy(i), table, cluster.host_convert_rates, 0);
      cost.Add(it->second);
    }
    slowdowns[static_cast<size_t>(op.id)] = cost.Slowdown(contiguous);
  }
  for (const DirectRead& d : direct_reads) {
    CopyCost cost;
    // A packed read copies what its sender's Pack wrote (the Pack's own slowdown is above).
    const std::vector<CopyPair>& copies = d.packed.empty() ? d.copies : d.packed.front().copies;
    for (const CopyPair& pair : copies) cost.Add(CostOf(pair, table, cluster.host_convert_rates, 0));
    slowdowns[static_cast<size_t>(d.send_op)] = cost.Slowdown(contiguous);
  }
  return slowdowns;
}

}  // namespace ferry::sim
