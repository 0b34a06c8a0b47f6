// Peer memory: shareable memfd blocks, mapping a peer's block through /proc/<pid>/fd, and
// process_vm_readv reads of another process's memory (a forked child reads its parent).
#include "core/runtime/peer_memory.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

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

TEST(PeerMemoryTest, ReadsAnotherProcessThroughProcessVmReadv) {
  // The parent's rows [r][0..8) of a [16, 32] fp32 matrix, read by a forked child into a dense
  // [16, 8] block; the child reports by exit code.
  std::vector<float> matrix(16 * 32);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<float>(i);
  Region from;
  from.space = Space::kSource;
  from.dtype = DType::kFP32;
  from.ndim = 2;
  from.shape = {16, 8};
  from.strides = {32, 1};
  Region to = from;
  to.space = Space::kDestination;
  to.strides = {8, 1};
  auto geometry = MakeCopyGeometry(from, to);
  ASSERT_TRUE(geometry.ok());
  const int64_t parent = ::getpid();
  const uint64_t address = reinterpret_cast<uint64_t>(matrix.data());
  pid_t child = ::fork();
  if (child == 0) {
    ::alarm(20);
    std::vector<float> out(16 * 8, -1);
    for (const CopySlice& s : SliceCopy(*geometry, 64, 3)) {
      const Status read = ReadFromPeer(parent, *geometry, s, address, reinterpret_cast<char*>(out.data()));
      if (read.code() == StatusCode::kFailedPrecondition) _exit(5);  // ptrace access denied here
      if (!read.ok()) _exit(2);
    }
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 8; ++c) {
        if (out[r * 8 + c] != static_cast<float>(r * 32 + c)) _exit(3);
      }
    }
    // A dead or foreign address fails instead of returning garbage.
    const bool refused = !ReadFromPeer(parent, *geometry, SliceCopy(*geometry, 1 << 20, 1)[0], 8,
                                       reinterpret_cast<char*>(out.data())).ok();
    _exit(refused ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 5) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace ferry
