// The copy rate of one host copy stream by the row pattern of the bytes it copies
// (ClusterSpec::host_copy_row_rates): a table of measured points, its validation, and the rate it
// gives any row length and pitch by interpolation.
//
// A copy's *row* is the innermost run of bytes the executor's copy loop loads at once
// (core/runtime/strided_copy.cc, RunCopySlice); its *pitch* is the distance in bytes from one
// row's start to the next's in the memory it loads from (the row length itself when rows follow
// each other). Short rows far apart copy slower: the executor benchmark's BM_ExecutorCopyRows
// measures the points (tests/core/runtime/executor_benchmark.cc).
#pragma once

#include <cstdint>
#include <span>

#include "core/base/status.h"

namespace ferry::sim {

// One measured point: rows of `row_bytes` taken every `pitch_bytes` copy at `rate` bytes/s.
struct RowRate {
  int64_t row_bytes = 0;
  int64_t pitch_bytes = 0;
  double rate = 0;
};

// Most points a table may hold, and the range of its rates in bytes/s (a cluster file is
// untrusted input; the range keeps every ratio of two rates finite).
inline constexpr int kMaxRowRates = 256;
inline constexpr double kMinRowRate = 1, kMaxRowRate = 1e15;

// Checks a table: at most kMaxRowRates points, each with row_bytes >= 1, pitch_bytes >= row_bytes
// and a rate in [kMinRowRate, kMaxRowRate], ordered by row length and, within a row length, by pitch, with no point
// repeated. The error names the point (1-based) and what is wrong with it.
Status ValidateRowRates(std::span<const RowRate> table);

// The table's contiguous rate: its longest rows at their smallest pitch (measured back to back,
// that is one long row).
double ContiguousRate(std::span<const RowRate> table);

// The rate of rows of `row_bytes` every `pitch_bytes` (a pitch below the row counts as the row)
// in a valid, non-empty table. The points of one row length give a rate by pitch, linear in
// log(pitch / row) between them and beyond the widest one clamped to it; below its smallest
// pitch the rate goes linearly, in the same log, towards ContiguousRate at rows back to back,
// whose loads are one sequential stream whatever the destination's layout. Two row lengths
// around the query are interpolated linearly in log(row); a row beyond the table's lengths takes
// the nearest.
double RowRateAt(std::span<const RowRate> table, int64_t row_bytes, int64_t pitch_bytes);

}  // namespace ferry::sim
