// The rate of one host copy stream that converts elements between two dtypes
// (ClusterSpec::host_convert_rates): a table of measured (from, to, rate) entries, its validation,
// and the rate of a pair. Measured with the executor's conversion loop (core/runtime/convert_row.h)
// by the executor benchmark's BM_ExecutorConvert, as host_copy_row_rates is with its copy loop, and
// read beside that table's contiguous rate: only their ratio matters.
#pragma once

#include <span>

#include "core/base/dtype.h"
#include "core/base/status.h"

namespace ferry::sim {

// Converting `from` elements into `to` elements reads `rate` bytes of `from` a second.
struct ConvertRate {
  DType from = DType::kBF16;
  DType to = DType::kBF16;
  double rate = 0;
};

// Most entries a table may hold (a cluster file is untrusted input).
inline constexpr int kMaxConvertRates = 64;

// Checks a table: at most kMaxConvertRates entries, each between two different dtypes with a rate
// in [kMinRowRate, kMaxRowRate] (tools/sim/row_rates.h), no pair twice. The error names the entry
// (1-based) and what is wrong with it.
Status ValidateConvertRates(std::span<const ConvertRate> table);

// The rate of converting `from` into `to`; 0 when the table does not list the pair.
double ConvertRateOf(std::span<const ConvertRate> table, DType from, DType to);

}  // namespace ferry::sim
