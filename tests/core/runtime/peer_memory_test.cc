// Peer memory: shareable memfd blocks and mapping a peer's block through /proc/<pid>/fd.
#include "core/runtime/peer_memory.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ferry {
namespace {

TEST(PeerMemoryTest, SharedBlockIsZeroedAndDescribedWithItsFile) {
  auto block = SharedHostMemory::Allocate(10000, "peer-memory-test");
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  for (int64_t i = 0; i < 10000; ++i) ASSERT_EQ(block->data()[i], 0);
  const MemoryDesc sub = block->Sub(4096, 100);
  EXPECT_EQ(sub.base, block->data() + 4096);
  EXPECT_GE(sub.shared_fd, 0);
  EXPECT_EQ(sub.shared_offset, 4096);
  BufferDescriber describer;
  auto described = describer.Describe(sub);
  ASSERT_TRUE(described.ok());
  EXPECT_NE(described->inode, 0u);
  EXPECT_EQ(described->shared_offset, 4096);
  MemoryDesc outside = sub;
  outside.shared_offset = 1 << 20;
  EXPECT_EQ(describer.Describe(outside).status().code(), StatusCode::kInvalidArgument);
}

TEST(PeerMemoryTest, MapsABlockOnceAndSeesItsWrites) {
  auto block = SharedHostMemory::Allocate(3 * 4096, "peer-memory-test");
  ASSERT_TRUE(block.ok());
  std::strcpy(block->data() + 5000, "written after sharing");
  BufferDescriber describer;
  auto a = describer.Describe(block->Sub(4096, 2000));
  auto b = describer.Describe(block->Sub(0, 100));
  ASSERT_TRUE(a.ok() && b.ok());
  PeerMappings mappings;
  const ProcessIdentity& self = ProcessIdentity::Self();
  auto fa = mappings.MapFile(self, *a);
  auto fb = mappings.MapFile(self, *b);
  ASSERT_TRUE(fa.ok()) << fa.status().ToString();
  ASSERT_TRUE(fb.ok());
  EXPECT_EQ(mappings.size(), 1u) << "two buffers of one block share a mapping";
  EXPECT_EQ(fa->base, fb->base);
  EXPECT_EQ(fa->length, 3 * 4096);
  const char* pa = fa->base + a->shared_offset;
  const char* pb = fb->base + b->shared_offset;
  EXPECT_STREQ(pa + (5000 - 4096), "written after sharing");
  EXPECT_EQ(pa - pb, 4096);
  // A recycled fd (other inode) is refused, not read.
  PeerBuffer wrong = *a;
  wrong.inode += 1;
  EXPECT_EQ(mappings.MapFile(self, wrong).status().code(), StatusCode::kUnavailable);
  // Unused mappings go at the second sweep.
  mappings.Sweep();
  EXPECT_EQ(mappings.size(), 1u);
  mappings.Sweep();
  EXPECT_EQ(mappings.size(), 0u);
}

}  // namespace
}  // namespace ferry
