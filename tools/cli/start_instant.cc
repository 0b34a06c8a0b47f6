// The start instant of `ferry run`'s refits: rank 0's margin, the agreement through the store, the
// absolute sleep.
#include "tools/cli/start_instant.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <ctime>

namespace ferry::cli {

int64_t WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void StartMargin::Observe(int64_t slack_ns) {
  const int64_t took = nanos_ - slack_ns;  // from the pick to the last rank knowing the instant
  nanos_ = std::clamp(2 * took, kFloorNs, kCapNs);
}

namespace {

Result<int64_t> DecodeInstant(const Bytes& value) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  int64_t instant = 0;
  const auto [at, error] = std::from_chars(begin, end, instant);
  if (error != std::errc() || at != end || instant <= 0) {
    return InvalidArgument("not a start instant: '" + std::string(begin, std::min<size_t>(value.size(), 32)) + "'");
  }
  return instant;
}

}  // namespace

Result<StartInstant> AgreeOnStart(Store& store, const std::string& key, int rank, int64_t margin_ns,
                                  Deadline deadline, const std::function<Status(const std::string&)>& barrier) {
  FERRY_RETURN_IF_ERROR(barrier(key + "/start"));
  StartInstant start;
  if (rank == 0) {
    start.instant_ns = WallNanos() + margin_ns;
    const std::string text = std::to_string(start.instant_ns);
    FERRY_RETURN_IF_ERROR(store.Set(
        key + "/instant", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
        deadline));
  }
  FERRY_RETURN_IF_ERROR(barrier(key + "/instant"));
  if (rank != 0) {
    FERRY_ASSIGN_OR_RETURN(Bytes value, store.Get(key + "/instant", deadline));
    FERRY_ASSIGN_OR_RETURN(start.instant_ns, DecodeInstant(value));
  }
  start.known_ns = WallNanos();
  return start;
}

int64_t WakeAt(int64_t instant_ns, int64_t now_ns) { return std::min(instant_ns, now_ns + StartMargin::kCapNs); }

void SleepUntil(int64_t instant_ns) {
  const int64_t wake = WakeAt(instant_ns, WallNanos());
  const timespec at{.tv_sec = static_cast<time_t>(wake / 1'000'000'000),
                    .tv_nsec = static_cast<long>(wake % 1'000'000'000)};
  while (::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, nullptr) == EINTR) {
  }
}

}  // namespace ferry::cli
