// Small string helpers shared by every package: formatting byte counts, joining, splitting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// "1.50 GiB", "12.0 MiB", "512 B".
std::string FormatBytes(double bytes);
// "[1, 2, 3]"
std::string FormatInts(const std::vector<int64_t>& values);
std::vector<std::string> Split(std::string_view text, char separator);
std::string Trim(std::string_view text);
bool StartsWith(std::string_view text, std::string_view prefix);

}  // namespace ferry
