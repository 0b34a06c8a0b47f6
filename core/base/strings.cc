// String helpers.
#include "core/base/strings.h"

#include <cstdio>

namespace ferry {

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string FormatBytesExactly(int64_t bytes) {
  return FormatBytes(static_cast<double>(bytes)) + " = " + std::to_string(bytes) + " bytes";
}

std::string FormatSeconds(double seconds, int ms_decimals, bool microseconds) {
  char buf[64];
  if (seconds >= 1) {
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  } else if (seconds >= 1e-3 || !microseconds) {
    std::snprintf(buf, sizeof buf, "%.*f ms", ms_decimals, seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  }
  return buf;
}

std::string FormatSpeedup(double ours_seconds, double theirs_seconds) {
  char text[48];
  const double ratio = theirs_seconds / ours_seconds;
  if (ratio >= 1.005) {
    std::snprintf(text, sizeof text, "%.2fx faster", ratio);
  } else if (ratio > 1 / 1.005) {
    return "as fast";
  } else {
    std::snprintf(text, sizeof text, "%.2fx slower", 1 / ratio);
  }
  return text;
}

std::string FormatInts(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  return out + "]";
}

std::vector<std::string> Split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(separator, start);
    if (pos == std::string_view::npos) {
      parts.emplace_back(text.substr(start));
      return parts;
    }
    parts.emplace_back(text.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string Trim(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\n' || text[b] == '\r')) ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n' ||
                   text[e - 1] == '\r'))
    --e;
  return std::string(text.substr(b, e - b));
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace ferry
