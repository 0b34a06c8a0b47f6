// ArenaAllocator: first fit in 256-byte units, all-or-nothing blocks, neighbours merged on free.
#include "core/runtime/staging_arena.h"

#include "core/cuda/batched_copy.h"

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
  ASSERT_TRUE(arena.Reallocate(4096, /*pinned=*/false).ok());
  EXPECT_NE(arena.data(), nullptr);
  EXPECT_EQ(arena.bytes(), 4096);
  EXPECT_FALSE(arena.pinned());
}

// Pinned staging needs a CUDA driver: without one, asking for it fails with a status (the run
// that needs it fails naming the staging arena) instead of crashing.
TEST(StagingArenaTest, PinnedBlockIsPinnedOrFailsCleanly) {
  StagingArena arena;
  Status s = arena.Reallocate(4096, /*pinned=*/true);
  if (cuda::DeviceCount() == 0) {
    EXPECT_FALSE(s.ok());
    GTEST_SKIP() << "no CUDA device: pinned memory cannot be had (" << s.ToString() << ")";
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(arena.pinned());
  arena.data()[4095] = 1;
}

}  // namespace
}  // namespace ferry
