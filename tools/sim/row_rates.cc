// Validation of, and interpolation in, a table of copy rates by row length and pitch.
#include "tools/sim/row_rates.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry::sim {
namespace {

// Linear interpolation of y at x between (x0, y0) and (x1, y1), x0 < x1, x clamped to [x0, x1].
double Lerp(double x, double x0, double y0, double x1, double y1) {
  const double t = std::clamp((x - x0) / (x1 - x0), 0.0, 1.0);
  return y0 + t * (y1 - y0);
}

// The rate of `group`, the points of one row length, at log(pitch / row) = `log_ratio`: between
// its points linear in log_ratio, beyond its widest pitch that point's rate, and below its
// smallest pitch towards `contiguous` at rows back to back (log_ratio 0).
double RateByPitch(std::span<const RowRate> group, double log_ratio, double contiguous) {
  auto log_ratio_of = [](const RowRate& p) {
    return std::log(static_cast<double>(p.pitch_bytes) / static_cast<double>(p.row_bytes));
  };
  const double first = log_ratio_of(group.front());
  if (log_ratio <= first) {
    return first > 0 ? Lerp(log_ratio, 0.0, contiguous, first, group.front().rate)
                     : group.front().rate;
  }
  for (size_t i = 1; i < group.size(); ++i) {
    const double x1 = log_ratio_of(group[i]);
    if (log_ratio <= x1) {
      return Lerp(log_ratio, log_ratio_of(group[i - 1]), group[i - 1].rate, x1, group[i].rate);
    }
  }
  return group.back().rate;
}

// The points of the table with row length `row_bytes` (a length the table has).
std::span<const RowRate> GroupOf(std::span<const RowRate> table, int64_t row_bytes) {
  const auto [begin, end] = std::equal_range(
      table.begin(), table.end(), RowRate{row_bytes, 0, 0},
      [](const RowRate& a, const RowRate& b) { return a.row_bytes < b.row_bytes; });
  return table.subspan(static_cast<size_t>(begin - table.begin()),
                       static_cast<size_t>(end - begin));
}

}  // namespace

Status ValidateRowRates(std::span<const RowRate> table) {
  if (table.size() > static_cast<size_t>(kMaxRowRates)) {
    return InvalidArgument("has " + std::to_string(table.size()) + " points, more than " +
                           std::to_string(kMaxRowRates));
  }
  for (size_t i = 0; i < table.size(); ++i) {
    const RowRate& p = table[i];
    const std::string where = "point " + std::to_string(i + 1) + " (row " +
                              std::to_string(p.row_bytes) + " B every " +
                              std::to_string(p.pitch_bytes) + " B)";
    if (p.row_bytes < 1) return InvalidArgument(where + ": the row must be >= 1 byte");
    if (p.pitch_bytes < p.row_bytes) {
      return InvalidArgument(where + ": rows cannot come closer than their length");
    }
    if (!(p.rate >= kMinRowRate && p.rate <= kMaxRowRate)) {
      return InvalidArgument(where + ": the rate must be between 1 B/s and 1 PB/s");
    }
    if (i == 0) continue;
    const RowRate& q = table[i - 1];
    if (p.row_bytes < q.row_bytes || (p.row_bytes == q.row_bytes && p.pitch_bytes <= q.pitch_bytes)) {
      return InvalidArgument(where +
                             ": points must be ordered by row and then by pitch, each once");
    }
  }
  return Status::Ok();
}

double ContiguousRate(std::span<const RowRate> table) {
  return GroupOf(table, table.back().row_bytes).front().rate;
}

double RowRateAt(std::span<const RowRate> table, int64_t row_bytes, int64_t pitch_bytes) {
  row_bytes = std::max<int64_t>(row_bytes, 1);
  const double log_ratio = std::log(static_cast<double>(std::max(pitch_bytes, row_bytes)) /
                                    static_cast<double>(row_bytes));
  const double contiguous = ContiguousRate(table);
  if (row_bytes <= table.front().row_bytes) {
    return RateByPitch(GroupOf(table, table.front().row_bytes), log_ratio, contiguous);
  }
  if (row_bytes >= table.back().row_bytes) {
    return RateByPitch(GroupOf(table, table.back().row_bytes), log_ratio, contiguous);
  }
  // The first point of a longer row; the one before it has the longest row <= row_bytes.
  const auto above = std::upper_bound(
      table.begin(), table.end(), row_bytes,
      [](int64_t row, const RowRate& p) { return row < p.row_bytes; });
  const int64_t row_lower = std::prev(above)->row_bytes, row_upper = above->row_bytes;
  const double rate_lower = RateByPitch(GroupOf(table, row_lower), log_ratio, contiguous);
  if (row_lower == row_bytes) return rate_lower;
  return Lerp(std::log(static_cast<double>(row_bytes)), std::log(static_cast<double>(row_lower)),
              rate_lower, std::log(static_cast<double>(row_upper)),
              RateByPitch(GroupOf(table, row_upper), log_ratio, contiguous));
}

}  // namespace ferry::sim
