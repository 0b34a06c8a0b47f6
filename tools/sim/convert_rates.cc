// Validation of, and lookup in, a table of host conversion rates by dtype pair.
#include "tools/sim/convert_rates.h"

#include <string>

#include "tools/sim/row_rates.h"

namespace ferry::sim {

Status ValidateConvertRates(std::span<const ConvertRate> table) {
  if (table.size() > static_cast<size_t>(kMaxConvertRates)) {
    return InvalidArgument("has " + std::to_string(table.size()) + " entries, more than " +
                           std::to_string(kMaxConvertRates));
  }
  for (size_t i = 0; i < table.size(); ++i) {
    const ConvertRate& e = table[i];
    const std::string where = "entry " + std::to_string(i + 1) + " (" + std::string(DTypeName(e.from)) +
                              " -> " + std::string(DTypeName(e.to)) + ")";
    if (e.from == e.to) return InvalidArgument(where + ": converts a dtype into itself");
    if (!(e.rate >= kMinRowRate && e.rate <= kMaxRowRate)) {
      return InvalidArgument(where + ": rate must be in [1 B/s, 1 PB/s]");
    }
    for (size_t j = 0; j < i; ++j) {
      if (table[j].from == e.from && table[j].to == e.to) {
        return InvalidArgument(where + ": the same pair as entry " + std::to_string(j + 1));
      }
    }
  }
  return Status::Ok();
}

double ConvertRateOf(std::span<const ConvertRate> table, DType from, DType to) {
  for (const ConvertRate& e : table) {
    if (e.from == from && e.to == to) return e.rate;
  }
  return 0;
}

}  // namespace ferry::sim
