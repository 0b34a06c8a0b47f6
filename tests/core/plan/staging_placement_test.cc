// StagingPlacement: loose first fit over the arena; fixed offsets given up front; tight, the
// plan-order layout kept for the op first in plan order and everything else first fit after it.
#include "core/plan/staging_placement.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

int64_t Bytes(int slot) { return slot == 0 ? 1024 : 512; }

// Slots 0 (1024 B) and 1 (512 B) in plan order at 0 and 1024, slot 2 (512 B) at 0 again once 0
// is dead: the layout's extent is 1536 bytes.
StagingLayout Layout() {
  StagingLayout layout;
  layout.order = {0, 1, 2};
  layout.offset = {{0, 0}, {1, 1024}, {2, 0}};
  layout.extent = 1536;
  return layout;
}

TEST(StagingPlacementTest, TheOpFirstInPlanOrderGetsItsLayoutOffsetsOnceTheyAreFree) {
  StagingPlacement p;
  p.ResetTight(Layout(), 2048);
  ASSERT_TRUE(p.Place({0}, true, Bytes));
  EXPECT_EQ(p.OffsetOf(0), 0);
  ASSERT_TRUE(p.Place({1}, true, Bytes));
  EXPECT_EQ(p.OffsetOf(1), 1024);
  EXPECT_FALSE(p.Place({2}, true, Bytes));  // slot 0, dead in plan order, is still held
  EXPECT_FALSE(p.Placed(2));
  p.Release(0);
  ASSERT_TRUE(p.Place({2}, true, Bytes));
  EXPECT_EQ(p.OffsetOf(2), 0);
  EXPECT_EQ(p.in_use(), 1024);
}

TEST(StagingPlacementTest, OpsAheadOfPlanOrderTakeOnlyTheArenaBeyondTheLayout) {
  StagingPlacement p;
  p.ResetTight(Layout(), 2048);
  ASSERT_TRUE(p.Place({1}, false, Bytes));
  EXPECT_EQ(p.OffsetOf(1), 1536);              // after the layout's 1536 bytes
  EXPECT_FALSE(p.Place({2}, false, Bytes));    // 512 bytes beyond the layout, all taken
  EXPECT_FALSE(p.Place({0, 2}, false, Bytes));  // all or none
  EXPECT_FALSE(p.Placed(0));
  ASSERT_TRUE(p.Place({0, 1}, true, Bytes));   // slot 1 is placed already: only 0 is new
  EXPECT_EQ(p.OffsetOf(0), 0);
  EXPECT_EQ(p.OffsetOf(1), 1536);
  p.Release(1);
  ASSERT_TRUE(p.Place({2}, false, Bytes));
  EXPECT_EQ(p.OffsetOf(2), 1536);
}

TEST(StagingPlacementTest, LoosePlacementIsFirstFitOverTheWholeArena) {
  StagingPlacement p;
  p.ResetLoose(2048);
  EXPECT_FALSE(p.tight());
  ASSERT_TRUE(p.Place({0, 1}, true, Bytes));  // in_order means nothing when loose
  EXPECT_EQ(p.OffsetOf(0), 0);
  EXPECT_EQ(p.OffsetOf(1), 1024);
  ASSERT_TRUE(p.Place({2}, false, Bytes));
  EXPECT_EQ(p.OffsetOf(2), 1536);
  EXPECT_EQ(p.OffsetOf(3), -1);
}

// Fixed placement puts each slot at its given offset whatever the order slots come in, so a
// repeated plan finds its slots where the previous run had them; it counts what it holds.
TEST(StagingPlacementTest, FixedPlacementKeepsEachSlotAtItsOffsetInAnyOrder) {
  for (bool reversed : {false, true}) {
    StagingPlacement p;
    p.ResetFixed({{0, 0}, {1, 1024}, {2, 1536}});
    EXPECT_FALSE(p.tight());
    ASSERT_TRUE(p.Place(reversed ? std::vector<int>{2} : std::vector<int>{0}, false, Bytes));
    ASSERT_TRUE(p.Place({1}, false, Bytes));
    ASSERT_TRUE(p.Place(reversed ? std::vector<int>{0} : std::vector<int>{2}, false, Bytes));
    EXPECT_EQ(p.OffsetOf(0), 0);
    EXPECT_EQ(p.OffsetOf(1), 1024);
    EXPECT_EQ(p.OffsetOf(2), 1536);
    EXPECT_EQ(p.in_use(), 1024 + 512 + 512);
    p.Release(1);
    EXPECT_EQ(p.in_use(), 1024 + 512);
    EXPECT_FALSE(p.Placed(1));
    EXPECT_FALSE(p.Place({3}, false, Bytes));  // no offset was given for slot 3
  }
}

}  // namespace
}  // namespace ferry
