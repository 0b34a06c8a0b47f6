// StagingArena: the block it holds, host or pinned.
#include "core/runtime/staging_arena.h"

#include "core/cuda/batched_copy.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

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
