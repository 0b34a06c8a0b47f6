// How much slower each op of a host-memory cluster copies than contiguous bytes, from the row
// pattern of the bytes the op copies and the cluster's host_copy_row_rates
// (tools/sim/row_rates.h), and from the dtypes its copies convert between and the cluster's
// host_convert_rates (tools/sim/convert_rates.h), and of each Quantize op from
// host_quantize_rate, computed once before a simulation.
#pragma once

#include <span>
#include <vector>

#include "core/plan/plan.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/strided_copy.h"
#include "tools/sim/cluster.h"

namespace ferry::sim {

// The row and pitch (tools/sim/row_rates.h) of a copy as the executor's copy loop walks it
// (core/runtime/strided_copy.cc, RunCopySlice): a row of contiguous elements is one run of
// run x element bytes, its pitch the source stride of the innermost outer dim (the row itself
// when there is none); a row of strided elements loads element by element, every from_inner bytes.
struct RowPattern {
  int64_t row_bytes = 0;
  int64_t pitch_bytes = 0;
};
RowPattern RowPatternOf(const CopyGeometry& geometry);

// Per op id, the time the op's copies take at the table's rates (a copy that converts a pair
// host_convert_rates lists: its source bytes at that rate) over the time the bytes they write
// take at the row table's contiguous rate (ContiguousRate), at least 1: for a Copy, Pack, Unpack
// or Convert, for a Quantize when host_quantize_rate is set (its values' bytes at that rate), and
// at the send op of each of `direct_reads` (found with kEveryReceiver, so with their copies); 1 for
// every other op and for ops whose copies move no bytes. A direct read with a packed read (its
// sender packs: DirectRead::packed) costs that read's copies. Empty when the cluster's ranks are
// not in host memory or it has no table. O(copies of the plan); pairs sharing a geometry record
// are measured once.
std::vector<double> HostCopySlowdowns(const TransferPlan& plan, const ClusterSpec& cluster,
                                      std::span<const DirectRead> direct_reads);

}  // namespace ferry::sim
