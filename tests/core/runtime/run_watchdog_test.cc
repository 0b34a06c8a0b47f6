// RunWatchdog: the action runs once after an armed deadline passes, never after Disarm.
#include "core/runtime/run_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ferry {
namespace {

TEST(RunWatchdogTest, FiresOnceWhenTheArmedDeadlinePasses) {
  RunWatchdog watchdog;
  std::atomic<int> fired{0};
  watchdog.Arm(Deadline::After(std::chrono::milliseconds(30)), [&] { ++fired; });
  const Deadline limit = Deadline::AfterSeconds(5);
  while (fired == 0 && !limit.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(fired, 1);
  watchdog.Disarm();
}

TEST(RunWatchdogTest, DisarmedInTimeNeverFires) {
  RunWatchdog watchdog;
  std::atomic<int> fired{0};
  watchdog.Arm(Deadline::After(std::chrono::milliseconds(100)), [&] { ++fired; });
  watchdog.Disarm();
  watchdog.Arm(Deadline::Never(), [&] { ++fired; });
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  watchdog.Disarm();
  EXPECT_EQ(fired, 0);
}

}  // namespace
}  // namespace ferry
