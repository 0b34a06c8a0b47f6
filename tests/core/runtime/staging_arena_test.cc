// ArenaAllocator: first fit in 256-byte units, all-or-nothing blocks, neighbours merged on free.
#include "core/runtime/staging_arena.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(ArenaAllocatorTest, FirstFitRoundsUpAndRefusesWhatDoesNotFit) {
  ArenaAllocator a;
  a.Reset(1024);
  EXPECT_EQ(a.Allocate(1), 0);      // rounded up to 256
  EXPECT_EQ(a.Allocate(300), 256);  // rounded up to 512
  EXPECT_EQ(a.in_use(), 768);
  EXPECT_EQ(a.Allocate(512), -1);
  EXPECT_EQ(a.Allocate(256), 768);
}

TEST(ArenaAllocatorTest, FreedNeighboursMergeIntoOneBlock) {
  ArenaAllocator a;
  a.Reset(768);
  const int64_t x = a.Allocate(256), y = a.Allocate(256), z = a.Allocate(256);
  a.Free(x);
  a.Free(z);
  EXPECT_EQ(a.Allocate(512), -1);  // two free blocks of 256, not adjacent
  a.Free(y);
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.Allocate(768), 0);
}

TEST(StagingArenaTest, ReallocateReplacesTheBlock) {
  StagingArena arena;
  EXPECT_EQ(arena.data(), nullptr);
  arena.Reallocate(4096);
  EXPECT_NE(arena.data(), nullptr);
  EXPECT_EQ(arena.bytes(), 4096);
}

}  // namespace
}  // namespace ferry
