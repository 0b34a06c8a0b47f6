// Deadline: a point on the steady clock by which a wait must end. Every blocking call in ferry takes
// one, so that nothing waits forever on a dead peer.
#pragma once

#include <chrono>
#include <cstdint>

namespace ferry {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline After(std::chrono::nanoseconds timeout) { return Deadline(Clock::now() + timeout); }
  static Deadline AfterSeconds(double seconds) {
    return After(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(seconds)));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }

  bool Expired() const { return Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }
  // Time left, clamped at zero.
  std::chrono::nanoseconds Remaining() const;
  // Milliseconds left for poll()-style calls: clamped to [0, INT32_MAX]; -1 never happens.
  int RemainingMillis() const;
  // The earlier of two deadlines.
  Deadline Min(Deadline other) const { return other.when_ < when_ ? other : *this; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

}  // namespace ferry
