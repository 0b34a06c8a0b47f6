// Tests for retained memory: large blocks are 2 MiB-aligned, kept when freed (within the limit) and
// handed out again to an allocation they fit; small ones pass through to operator new; concurrent
// use keeps every block's contents its own.
#include "core/base/retained_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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

TEST_F(RetainedMemory, AKeptBlockServesAtMostTwiceItsSize) {
  void* big = AllocateRetained(8 * kMiB);
  FreeRetained(big, 8 * kMiB);
  // 2 MiB asked: the 8 MiB block is more than twice that, so a new block is mapped.
  void* small = AllocateRetained(2 * kMiB);
  EXPECT_NE(small, big);
  FreeRetained(small, 2 * kMiB);
  EXPECT_EQ(RetainedBytes(), 10 * kMiB);
  // 5 MiB asked (6 mapped): the 8 MiB block serves it, and goes back whole.
  void* mid = AllocateRetained(5 * kMiB);
  EXPECT_EQ(mid, big);
  EXPECT_EQ(RetainedBytes(), 2 * kMiB);
  FreeRetained(mid, 5 * kMiB);
  EXPECT_EQ(RetainedBytes(), 10 * kMiB);
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
  const void* first = nullptr;
  for (int round = 0; round < 3; ++round) {
    RetainedVector<int64_t> v;
    for (int64_t i = 0; i < 1'000'000; ++i) v.push_back(i * 3);  // grows through several blocks
    for (int64_t i = 0; i < 1'000'000; i += 9973) ASSERT_EQ(v[static_cast<size_t>(i)], i * 3);
    if (round == 0) first = v.data();
    if (round > 0) {
      EXPECT_EQ(v.data(), first);  // the same sequence of sizes: the same blocks
    }
  }
  EXPECT_GT(RetainedBytes(), 8 * kMiB);
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

TEST(RetainedMemoryUnderSanitizer, BlocksStillWork) {
  // Whether or not blocks are kept, what is allocated is usable and freed without error.
  RetainedVector<char> v(5 * kMiB, 'x');
  EXPECT_EQ(v[5 * kMiB - 1], 'x');
}

}  // namespace
}  // namespace ferry
