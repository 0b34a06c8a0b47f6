// The start instant of `ferry run`'s refits: rank 0's margin follows the last release within its
// floor and cap, every rank learns rank 0's instant through the store, a value that is not an
// instant is refused, a rank sleeps until the instant but never past the cap.
#include "tools/cli/start_instant.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ferry::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(StartMarginTest, TwiceTheLastReleaseWithinTheFloorAndTheCap) {
  StartMargin margin;
  EXPECT_EQ(margin.nanos(), StartMargin::kInitialNs);
  margin.Observe(StartMargin::kInitialNs - 10 * kMs);  // the last rank knew it 10 ms after the pick
  EXPECT_EQ(margin.nanos(), 20 * kMs);
  margin.Observe(20 * kMs);  // known at once
  EXPECT_EQ(margin.nanos(), StartMargin::kFloorNs);
  margin.Observe(-10'000 * kMs);  // known 10 s after the instant
  EXPECT_EQ(margin.nanos(), StartMargin::kCapNs);
}

TEST(StartInstantTest, EveryRankLearnsTheInstantRankZeroPicked) {
  InMemoryStore store;
  constexpr int kRanks = 3;
  constexpr int64_t kMargin = 5 * kMs;
  std::vector<Result<StartInstant>> learned(kRanks, StartInstant{});
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      const Deadline deadline = Deadline::AfterSeconds(20);
      learned[rank] = AgreeOnStart(store, "refit7", rank, rank == 0 ? kMargin : 0, deadline,
                                   [&](const std::string& name) { return Barrier(store, name, kRanks, deadline); });
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(learned[rank].ok()) << learned[rank].status().ToString();
    EXPECT_EQ(learned[rank]->instant_ns, learned[0]->instant_ns);
    // Learned after rank 0 picked it, on the one clock of this host.
    EXPECT_GE(learned[rank]->known_ns, learned[0]->instant_ns - kMargin);
  }
}

TEST(StartInstantTest, AValueThatIsNotAnInstantIsRefused) {
  InMemoryStore store;
  const Deadline deadline = Deadline::AfterSeconds(10);
  const std::string junk = "12ab";
  ASSERT_TRUE(store
                  .Set("refit1/instant",
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(junk.data()), junk.size()), deadline)
                  .ok());
  Result<StartInstant> start =
      AgreeOnStart(store, "refit1", 1, 0, deadline, [](const std::string&) { return Status::Ok(); });
  ASSERT_FALSE(start.ok());
  EXPECT_NE(start.status().message().find("not a start instant: '12ab'"), std::string::npos)
      << start.status().ToString();
}

TEST(StartInstantTest, AWakeNeverLiesFurtherThanTheCap) {
  const int64_t now = 1'000'000 * kMs;
  EXPECT_EQ(WakeAt(now + 3 * kMs, now), now + 3 * kMs);
  EXPECT_EQ(WakeAt(now - 3 * kMs, now), now - 3 * kMs);
  EXPECT_EQ(WakeAt(now + 3'600'000 * kMs, now), now + StartMargin::kCapNs);
}

TEST(StartInstantTest, SleepUntilReturnsOnceTheClockHasReachedTheInstant) {
  const int64_t instant = WallNanos() + 2 * kMs;
  SleepUntil(instant);
  EXPECT_GE(WallNanos(), instant);
  SleepUntil(WallNanos() - 1'000 * kMs);  // passed: returns at once
}

}  // namespace
}  // namespace ferry::cli
