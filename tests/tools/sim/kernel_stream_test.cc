// Tests for KernelStream, the simulator's replay of a rank's CUDA stream: launches run one after
// another in the order they were made; reads that come at one instant are one launch, reads that
// come one by one launches of their own; a kernel that comes as a launch ends waits for the next.
#include "tools/sim/kernel_stream.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry::sim {
namespace {

std::vector<int> Arrive(KernelStream& s, int id, bool read, double t) {
  std::vector<int> start;
  s.Arrive(id, read, t, start);
  return start;
}

// Finishes the running launch's `flows` flows, then starts the next one: its flows.
std::vector<int> FinishLaunch(KernelStream& s, int flows) {
  for (int k = 1; k < flows; ++k) EXPECT_FALSE(s.Finish()) << "flow " << k << " of " << flows;
  EXPECT_TRUE(s.Finish());
  std::vector<int> start;
  s.Next(start);
  return start;
}

TEST(KernelStreamTest, LocalLaunchesRunOneAfterAnother) {
  KernelStream s;
  EXPECT_EQ(Arrive(s, 1, false, 0), std::vector<int>{1});
  EXPECT_TRUE(Arrive(s, 2, false, 0).empty());
  EXPECT_TRUE(Arrive(s, 3, false, 1).empty());
  EXPECT_EQ(FinishLaunch(s, 1), std::vector<int>{2});
  EXPECT_EQ(FinishLaunch(s, 1), std::vector<int>{3});
  EXPECT_TRUE(FinishLaunch(s, 1).empty());
  EXPECT_EQ(Arrive(s, 4, false, 5), std::vector<int>{4}) << "an idle stream starts it at once";
}

TEST(KernelStreamTest, ReadsThatComeAtOneInstantAreOneLaunch) {
  KernelStream s;
  EXPECT_EQ(Arrive(s, 1, true, 0), std::vector<int>{1});
  EXPECT_EQ(Arrive(s, 2, true, 0), std::vector<int>{2}) << "joins the running launch";
  EXPECT_TRUE(Arrive(s, 3, false, 0).empty());
  EXPECT_TRUE(Arrive(s, 4, true, 0).empty()) << "a local launch lies between: a launch of its own";
  EXPECT_TRUE(Arrive(s, 5, true, 0).empty());
  EXPECT_TRUE(Arrive(s, 6, true, 1).empty()) << "another instant: another launch";
  EXPECT_FALSE(s.Finish());
  EXPECT_TRUE(s.Finish());
  std::vector<int> start;
  s.Next(start);
  EXPECT_EQ(start, std::vector<int>{3});
  EXPECT_EQ(FinishLaunch(s, 1), (std::vector<int>{4, 5}));
  EXPECT_EQ(FinishLaunch(s, 2), std::vector<int>{6});
  EXPECT_TRUE(FinishLaunch(s, 1).empty());
}

// A stream whose last launch just finished (Finish returned true, Next not yet called) is not
// free: a kernel that comes in between waits for Next, behind what was queued.
TEST(KernelStreamTest, AKernelThatComesAsTheLaunchEndsQueuesBehindTheNext) {
  KernelStream s;
  EXPECT_EQ(Arrive(s, 1, false, 0), std::vector<int>{1});
  EXPECT_TRUE(Arrive(s, 2, false, 0).empty());
  EXPECT_TRUE(s.Finish());
  EXPECT_TRUE(Arrive(s, 3, false, 1).empty());
  std::vector<int> start;
  s.Next(start);
  EXPECT_EQ(start, std::vector<int>{2});
  EXPECT_EQ(FinishLaunch(s, 1), std::vector<int>{3});
}

}  // namespace
}  // namespace ferry::sim
