// Deadline arithmetic.
#include "core/base/deadline.h"

#include <algorithm>
#include <limits>

namespace ferry {

std::chrono::nanoseconds Deadline::Remaining() const {
  if (when_ == Clock::time_point::max()) return std::chrono::nanoseconds::max();
  auto left = when_ - Clock::now();
  return std::max(std::chrono::nanoseconds(0),
                  std::chrono::duration_cast<std::chrono::nanoseconds>(left));
}

int Deadline::RemainingMillis() const {
  auto left = Remaining();
  if (left == std::chrono::nanoseconds::max()) return std::numeric_limits<int32_t>::max();
  int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
  if (left > std::chrono::milliseconds(ms)) ++ms;  // round up so a poll never spins at 0 early
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int32_t>::max()));
}

}  // namespace ferry
