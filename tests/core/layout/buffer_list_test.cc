// Tests for BufferList: edits reach the specs, and the rank count follows ranks up and down.
#include "core/layout/buffer_list.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ferry {
namespace {

// One more than the highest rank of the list's specs, counted afresh.
int CountRanks(const BufferList& list) {
  int num_ranks = 0;
  for (const BufferSpec& b : list) num_ranks = std::max(num_ranks, b.rank + 1);
  return num_ranks;
}

TEST(BufferList, EditsReachTheSpecsAndTheRankCountFollows) {
  BufferList list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.NumRanks(), 0);
  list.push_back({2, "w", 64});
  list.push_back({5, "v", 0});
  EXPECT_EQ(list.NumRanks(), 6);
  list.SetBytes(1, 128);
  list.GrowBytes(1, 100);  // smaller: no change
  list.GrowBytes(0, 96);
  EXPECT_EQ(list[0].bytes, 96);
  EXPECT_EQ(list[1].bytes, 128);
  list.SetName(0, "renamed");
  EXPECT_EQ(list[0].name, "renamed");
  list.SetRank(1, 9);  // the highest rank goes up
  EXPECT_EQ(list.NumRanks(), CountRanks(list));
  list.SetRank(1, 0);  // and down: counted again
  EXPECT_EQ(list.NumRanks(), 3);
  EXPECT_EQ(list.NumRanks(), CountRanks(list));
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.NumRanks(), 0);
}

}  // namespace
}  // namespace ferry
