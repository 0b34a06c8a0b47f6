// Small string helpers shared by every package: formatting byte counts and durations, joining,
// splitting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// "1.50 GiB", "12.0 MiB", "512 B".
std::string FormatBytes(double bytes);
// "2.98 MiB = 3124736 bytes": readable, and exact where a limit is one byte short.
std::string FormatBytesExactly(int64_t bytes);
// A duration: "1.500 s" from a second on; below, milliseconds with `ms_decimals` decimals
// ("12.5 ms"); below a millisecond, microseconds ("850.0 us") when `microseconds`, else still
// milliseconds ("0.9 ms").
std::string FormatSeconds(double seconds, int ms_decimals = 1, bool microseconds = true);
// How one time compares with another, as a speed: "2.20x faster" when `ours` is below `theirs`,
// "1.25x slower" when above (never "0.80x faster"), "as fast" when equal to two decimals.
std::string FormatSpeedup(double ours_seconds, double theirs_seconds);
// "[1, 2, 3]"
std::string FormatInts(const std::vector<int64_t>& values);
std::vector<std::string> Split(std::string_view text, char separator);
std::string Trim(std::string_view text);
bool StartsWith(std::string_view text, std::string_view prefix);

}  // namespace ferry
