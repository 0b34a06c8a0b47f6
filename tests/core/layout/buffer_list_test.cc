// Tests for BufferList: specs and the compact table of extents agree through every edit, the rank
// count follows ranks up and down, and a table handed out (Extents) never changes afterwards.
#include "core/layout/buffer_list.h"

#include <gtest/gtest.h>

#include "core/layout/layout.h"

namespace ferry {
namespace {

// The list's specs and its table say the same, index by index.
void ExpectTableMatches(const BufferList& list) {
  const std::shared_ptr<const BufferExtents> table = list.Extents();
  ASSERT_EQ(table->size(), list.size());
  int num_ranks = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ((*table)[i].rank, list[i].rank) << "buffer " << i;
    EXPECT_EQ((*table)[i].bytes, list[i].bytes) << "buffer " << i;
    num_ranks = std::max(num_ranks, list[i].rank + 1);
  }
  EXPECT_EQ(list.NumRanks(), num_ranks);
}

TEST(BufferList, SpecsAndTableAgreeThroughEdits) {
  BufferList list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.NumRanks(), 0);
  EXPECT_NE(list.Extents(), nullptr);
  EXPECT_TRUE(list.Extents()->empty());
  list.push_back({2, "w", 64});
  list.push_back({5, "v", 0});
  ExpectTableMatches(list);
  EXPECT_EQ(list.NumRanks(), 6);
  list.SetBytes(1, 128);
  list.GrowBytes(1, 100);  // smaller: no change
  list.GrowBytes(0, 96);
  EXPECT_EQ(list[0].bytes, 96);
  EXPECT_EQ(list[1].bytes, 128);
  list.SetName(0, "renamed");
  EXPECT_EQ(list[0].name, "renamed");
  ExpectTableMatches(list);
  list.SetRank(1, 9);  // the highest rank goes up
  ExpectTableMatches(list);
  list.SetRank(1, 0);  // and down: counted again
  ExpectTableMatches(list);
  EXPECT_EQ(list.NumRanks(), 3);
  list.clear();
  EXPECT_TRUE(list.empty());
  ExpectTableMatches(list);
}

TEST(BufferList, ATableHandedOutNeverChanges) {
  BufferList list = {{0, "a", 10}, {1, "b", 20}};
  const std::shared_ptr<const BufferExtents> before = list.Extents();
  EXPECT_EQ(list.Extents(), before);  // no edit: the same table
  list.SetBytes(0, 11);
  list.SetRank(1, 4);
  list.push_back({2, "c", 30});
  ASSERT_EQ(before->size(), 2u);
  EXPECT_EQ((*before)[0].bytes, 10);
  EXPECT_EQ((*before)[1].rank, 1);
  ExpectTableMatches(list);
  // A copy of the list shares the table until either is edited.
  BufferList copy = list;
  EXPECT_EQ(copy.Extents(), list.Extents());
  copy.SetBytes(2, 31);
  EXPECT_EQ(list[2].bytes, 30);
  EXPECT_EQ((*list.Extents())[2].bytes, 30);
  ExpectTableMatches(copy);
  ExpectTableMatches(list);
}

TEST(BufferList, ALayoutsFragmentsGrowTheTable) {
  Layout layout;
  const int t = layout.AddTensor({"w", {4, 8}, DType::kFP32}).value();
  Box box;
  box.ndim = 2;
  box.lo[0] = 0;
  box.hi[0] = 2;
  box.lo[1] = 0;
  box.hi[1] = 8;
  layout.AppendFragment(t, box, 3, "flat");
  box.lo[0] = 2;
  box.hi[0] = 4;
  layout.AppendFragment(t, box, 3, "flat");
  ASSERT_EQ(layout.buffers.size(), 1u);
  EXPECT_EQ(layout.buffers[0].bytes, 4 * 8 * 4);
  ExpectTableMatches(layout.buffers);
}

}  // namespace
}  // namespace ferry
