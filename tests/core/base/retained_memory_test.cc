// Tests for retained memory: large blocks are 2 MiB-aligned, kept when freed (within the limit) and
// handed out again, split for smaller blocks, taken together where they lie side by side, or moved
// together into larger ones with their pages as they were; small ones pass through to operator new;
// concurrent use keeps every block's contents its own.
#include "core/base/retained_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ferry {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class RetainedMemory : public testing::Test {
 protected:
  void SetUp() override {
    if (!RetainsMemory()) GTEST_SKIP() << "built with AddressSanitizer: nothing is kept";
    ReleaseRetained();
    SetRetainedLimit(512 * kMiB);
  }
  void TearDown() override { ReleaseRetained(); }
};

TEST_F(RetainedMemory, SmallBlocksAreNotKept) {
  void* p = AllocateRetained(1000);
  std::memset(p, 1, 1000);
  FreeRetained(p, 1000);
  EXPECT_EQ(RetainedBytes(), 0u);
}

TEST_F(RetainedMemory, LargeBlocksAreAlignedKeptAndReused) {
  void* p = AllocateRetained(3 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * kMiB), 0u);
  std::memset(p, 7, 3 * kMiB);
  FreeRetained(p, 3 * kMiB);
  EXPECT_EQ(RetainedBytes(), 4 * kMiB);  // kept at its mapped size, a multiple of 2 MiB
  // An allocation it fits takes it back, contents and all (it is not cleared).
  void* q = AllocateRetained(3 * kMiB + 4096);
  EXPECT_EQ(q, p);
  EXPECT_EQ(static_cast<unsigned char*>(q)[12345], 7);
  EXPECT_EQ(RetainedBytes(), 0u);
  FreeRetained(q, 3 * kMiB + 4096);
  EXPECT_EQ(RetainedBytes(), 4 * kMiB);
}

TEST_F(RetainedMemory, AKeptPieceIsSplitForSmallerBlocksAndJoinedWhenTheyComeBack) {
  void* big = AllocateRetained(8 * kMiB);
  FreeRetained(big, 8 * kMiB);
  EXPECT_EQ(RetainedMappedBytes(), 8 * kMiB);
  // 2 MiB asked: the front of the kept 8 MiB, nothing mapped anew.
  void* small = AllocateRetained(2 * kMiB);
  EXPECT_EQ(small, big);
  EXPECT_EQ(RetainedBytes(), 6 * kMiB);
  // 5 MiB asked (6 mapped): the rest of it.
  void* mid = AllocateRetained(5 * kMiB);
  EXPECT_EQ(mid, static_cast<char*>(big) + 2 * kMiB);
  EXPECT_EQ(RetainedBytes(), 0u);
  EXPECT_EQ(RetainedMappedBytes(), 8 * kMiB);
  FreeRetained(small, 2 * kMiB);
  FreeRetained(mid, 5 * kMiB);
  EXPECT_EQ(RetainedBytes(), 8 * kMiB);
  // Joined again: 8 MiB asked comes back in place, whole.
  void* again = AllocateRetained(8 * kMiB);
  EXPECT_EQ(again, big);
  FreeRetained(again, 8 * kMiB);
  EXPECT_EQ(RetainedMappedBytes(), 8 * kMiB);
}

TEST_F(RetainedMemory, PiecesOfSeveralMappingsServeOneLargerBlockWithTheirPagesAsTheyWere) {
  auto* a = static_cast<unsigned char*>(AllocateRetained(4 * kMiB));
  auto* b = static_cast<unsigned char*>(AllocateRetained(2 * kMiB));
  std::memset(a, 0xa, 4 * kMiB);
  std::memset(b, 0xb, 2 * kMiB);
  FreeRetained(a, 4 * kMiB);
  FreeRetained(b, 2 * kMiB);
  ASSERT_EQ(RetainedMappedBytes(), 6 * kMiB);
  // 8 MiB asked: nothing kept holds it, so both move into the front of one new range (in an order
  // that depends on where the system put them), and only the last 2 MiB are fresh. Their pages
  // move as they are: filled, not zeroed.
  auto* c = static_cast<unsigned char*>(AllocateRetained(8 * kMiB));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % (2 * kMiB), 0u);
  EXPECT_EQ(RetainedBytes(), 0u);
  EXPECT_EQ(RetainedMappedBytes(), 8 * kMiB);
  const bool a_first = c[0] == 0xa;
  for (size_t k = 0; k < 8 * kMiB; k += 4093) {
    const size_t a_begin = a_first ? 0 : 2 * kMiB;
    const size_t b_begin = a_first ? 4 * kMiB : 0;
    const int expected = k >= 6 * kMiB                            ? 0
                         : k >= a_begin && k < a_begin + 4 * kMiB ? 0xa
                         : k >= b_begin && k < b_begin + 2 * kMiB ? 0xb
                                                                  : -1;
    ASSERT_EQ(c[k], expected) << "byte " << k;
  }
  std::memset(c, 0xc, 8 * kMiB);
  FreeRetained(c, 8 * kMiB);
  EXPECT_EQ(RetainedBytes(), 8 * kMiB);
  // Its parts lie in mappings of their own, but side by side: the same size asked again takes
  // them where they are, moving nothing.
  auto* d = static_cast<unsigned char*>(AllocateRetained(8 * kMiB));
  EXPECT_EQ(d, c);
  for (size_t k = 0; k < 8 * kMiB; k += 4093) ASSERT_EQ(d[k], 0xc) << "byte " << k;
  // A smaller block takes the front of them, a larger one moves them again.
  FreeRetained(d, 8 * kMiB);
  auto* front = static_cast<unsigned char*>(AllocateRetained(5 * kMiB));
  EXPECT_EQ(front, c);
  FreeRetained(front, 5 * kMiB);
  auto* larger = static_cast<unsigned char*>(AllocateRetained(10 * kMiB));
  for (size_t k = 0; k < 10 * kMiB; k += 4093) {
    ASSERT_EQ(larger[k], k < 8 * kMiB ? 0xc : 0) << "byte " << k;
  }
  FreeRetained(larger, 10 * kMiB);
  EXPECT_EQ(RetainedMappedBytes(), 10 * kMiB);
}

TEST_F(RetainedMemory, TheLimitBoundsWhatIsKept) {
  SetRetainedLimit(4 * kMiB);
  EXPECT_EQ(RetainedLimit(), 4 * kMiB);
  void* a = AllocateRetained(4 * kMiB);
  void* b = AllocateRetained(2 * kMiB);
  FreeRetained(a, 4 * kMiB);
  EXPECT_EQ(RetainedBytes(), 4 * kMiB);
  FreeRetained(b, 2 * kMiB);  // over the limit: unmapped
  EXPECT_EQ(RetainedBytes(), 4 * kMiB);
  SetRetainedLimit(3 * kMiB);  // the kept 4 MiB block goes back
  EXPECT_EQ(RetainedBytes(), 0u);
  SetRetainedLimit(0);
  void* c = AllocateRetained(2 * kMiB);
  FreeRetained(c, 2 * kMiB);
  EXPECT_EQ(RetainedBytes(), 0u);
}

TEST_F(RetainedMemory, VectorsReuseTheBlocksOfEarlierVectors) {
  size_t mapped_after_first = 0;
  for (int round = 0; round < 3; ++round) {
    {
      RetainedVector<int64_t> v;
      for (int64_t i = 0; i < 1'000'000; ++i) v.push_back(i * 3);  // grows through 1-8 MiB blocks
      for (int64_t i = 0; i < 1'000'000; i += 9973) ASSERT_EQ(v[static_cast<size_t>(i)], i * 3);
    }
    if (round == 0) mapped_after_first = RetainedMappedBytes();
    // The same sequence of sizes again: served by what the first round left, nothing mapped anew.
    EXPECT_EQ(RetainedMappedBytes(), mapped_after_first) << "round " << round;
    EXPECT_EQ(RetainedBytes(), mapped_after_first) << "round " << round;
  }
  EXPECT_GE(mapped_after_first, 8 * kMiB);
}

TEST_F(RetainedMemory, ThreadsKeepTheirBlocksApart) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 50; ++i) {
        const size_t bytes = (1 + (i * 7 + t) % 5) * kMiB;
        auto* block = static_cast<unsigned char*>(AllocateRetained(bytes));
        std::memset(block, t + 1, bytes);
        std::this_thread::yield();
        for (size_t k = 0; k < bytes; k += 4093) failures[t] += block[k] != t + 1;
        FreeRetained(block, bytes);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// Blocks of random sizes allocated and freed in random order, with the limit changed now and then:
// every block keeps its own contents, is 2 MiB-aligned, and the bytes kept never pass the limit
// nor the bytes mapped.
TEST_F(RetainedMemory, RandomAllocationsKeepContentsAndAccounts) {
  struct Live {
    unsigned char* block;
    size_t bytes;
    unsigned char fill;
  };
  std::mt19937 random(20261130);
  std::vector<Live> live;
  size_t limit = 64 * kMiB;
  SetRetainedLimit(limit);
  for (int step = 0; step < 600; ++step) {
    const int action = static_cast<int>(random() % 10);
    if (action < 5 || live.empty()) {
      const size_t bytes = kMiB + random() % (12 * kMiB);
      const auto fill = static_cast<unsigned char>(1 + step % 250);
      auto* block = static_cast<unsigned char*>(AllocateRetained(bytes));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(block) % (2 * kMiB), 0u);
      // Writes a page in eight, as a growing vector might: moved pages must keep these.
      for (size_t k = 0; k < bytes; k += 8 * 4096) block[k] = fill;
      block[bytes - 1] = fill;
      live.push_back({block, bytes, fill});
    } else if (action < 9) {
      const size_t i = random() % live.size();
      const Live l = live[i];
      for (size_t k = 0; k < l.bytes; k += 8 * 4096)
        ASSERT_EQ(l.block[k], l.fill) << "step " << step;
      ASSERT_EQ(l.block[l.bytes - 1], l.fill) << "step " << step;
      FreeRetained(l.block, l.bytes);
      live[i] = live.back();
      live.pop_back();
    } else {
      limit = (random() % 96) * kMiB;
      SetRetainedLimit(limit);
    }
    ASSERT_LE(RetainedBytes(), limit) << "step " << step;
    ASSERT_LE(RetainedBytes(), RetainedMappedBytes()) << "step " << step;
  }
  size_t in_use = 0;
  for (const Live& l : live) {
    for (size_t k = 0; k < l.bytes; k += 8 * 4096) ASSERT_EQ(l.block[k], l.fill);
    in_use += (l.bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
    FreeRetained(l.block, l.bytes);
  }
  EXPECT_EQ(RetainedMappedBytes() - RetainedBytes(), 0u);  // nothing in use is left
  EXPECT_GT(in_use, 0u);
  ReleaseRetained();
  EXPECT_EQ(RetainedMappedBytes(), 0u);
}

TEST(RetainedMemoryUnderSanitizer, BlocksStillWork) {
  // Whether or not blocks are kept, what is allocated is usable and freed without error.
  RetainedVector<char> v(5 * kMiB, 'x');
  EXPECT_EQ(v[5 * kMiB - 1], 'x');
}

}  // namespace
}  // namespace ferry
