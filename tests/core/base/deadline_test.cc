// Tests for Deadline.
#include "core/base/deadline.h"

#include <gtest/gtest.h>

#include <thread>

namespace ferry {
namespace {

TEST(DeadlineTest, ExpiresAfterTimeout) {
  Deadline d = Deadline::After(std::chrono::milliseconds(20));
  EXPECT_FALSE(d.Expired());
  EXPECT_GT(d.RemainingMillis(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(d.Expired());
  EXPECT_EQ(d.RemainingMillis(), 0);
  EXPECT_EQ(d.Remaining().count(), 0);
}

TEST(DeadlineTest, NeverDoesNotExpire) {
  Deadline d = Deadline::Never();
  EXPECT_FALSE(d.Expired());
  EXPECT_GT(d.RemainingMillis(), 1000000);
}

TEST(DeadlineTest, MinPicksEarlier) {
  Deadline soon = Deadline::AfterSeconds(0.01);
  Deadline late = Deadline::AfterSeconds(100);
  EXPECT_EQ(soon.Min(late).when(), soon.when());
  EXPECT_EQ(late.Min(soon).when(), soon.when());
}

}  // namespace
}  // namespace ferry
