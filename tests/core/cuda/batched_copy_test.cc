// Tests the batched strided-copy kernel against a CPU reference on random data, one table at a
// time and many tables in one launch; skipped, visibly, where no GPU is present.
#include "core/cuda/batched_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace ferry::cuda {
namespace {

class BatchedCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
    std::printf("running on %s\n", DeviceName(0).c_str());
  }
};

// CPU reference of one StridedCopy between host buffers (pointers relative to given bases).
void ReferenceCopy(const StridedCopy& c, const unsigned char* src, unsigned char* dst) {
  int64_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= c.shape[d];
  for (int64_t e = 0; e < total; ++e) {
    int64_t rest = e, s = 0, t = 0;
    for (int d = c.ndim - 1; d >= 0; --d) {
      int64_t i = rest % c.shape[d];
      rest /= c.shape[d];
      s += i * c.src_strides[d];
      t += i * c.dst_strides[d];
    }
    std::memcpy(dst + t, src + s, c.elem_size);
  }
}

TEST_F(BatchedCopyTest, ManyStridedRegionsMatchReference) {
  constexpr int64_t kBytes = 8 << 20;
  std::mt19937_64 rng(7);
  std::vector<unsigned char> host_src(kBytes), expected(kBytes), actual(kBytes);
  for (auto& b : host_src) b = static_cast<unsigned char>(rng());
  for (auto& b : expected) b = 0xAB;  // poison: every byte not written must stay 0xAB
  auto src = DeviceAlloc(kBytes);
  auto dst = DeviceAlloc(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(CopyToDevice(*src, host_src.data(), kBytes).ok());
  ASSERT_TRUE(CopyToDevice(*dst, expected.data(), kBytes).ok());

  // Disjoint destination areas: copy i writes into [i * 64 KiB, (i+1) * 64 KiB).
  std::vector<StridedCopy> copies;
  for (int i = 0; i < 100; ++i) {
    StridedCopy c;
    c.elem_size = int64_t{1} << (rng() % 4);  // 1, 2, 4, 8 bytes
    c.ndim = 1 + static_cast<int>(rng() % 3);
    int64_t dense = c.elem_size;
    for (int d = c.ndim - 1; d >= 0; --d) {
      c.shape[d] = 1 + static_cast<int64_t>(rng() % 12);
      c.dst_strides[d] = dense;
      c.src_strides[d] = dense * (1 + static_cast<int64_t>(rng() % 2));  // sometimes strided
      dense *= c.shape[d];
    }
    const int64_t src_offset = static_cast<int64_t>(rng() % (kBytes / 2)) & ~int64_t{15};
    const int64_t dst_offset = int64_t{i} * 65536 + (rng() % 2 ? 0 : c.elem_size);
    c.src = static_cast<unsigned char*>(*src) + src_offset;
    c.dst = static_cast<unsigned char*>(*dst) + dst_offset;
    copies.push_back(c);
    StridedCopy host = c;
    ReferenceCopy(host, host_src.data() + src_offset, expected.data() + dst_offset);
  }
  ASSERT_TRUE(LaunchBatchedCopy(copies, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  ASSERT_TRUE(CopyToHost(actual.data(), *dst, kBytes).ok());
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), kBytes), 0);
  EXPECT_TRUE(DeviceFree(*src).ok());
  EXPECT_TRUE(DeviceFree(*dst).ok());
}

// Rows longer than a block's share (a block per segment), rows just under it (several rows a
// block), odd lengths and alignments, and copies of hundreds of blocks next to one-block copies:
// each block must find its own copy and segment. `count` copies, the `empty`-th (when >= 0) with
// no elements.
void CopyLongAndShortRows(int count, int empty, uint64_t seed) {
  constexpr int64_t kBytes = 48 << 20;
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> host_src(kBytes), expected(kBytes, 0xCD), actual(kBytes);
  for (auto& b : host_src) b = static_cast<unsigned char>(rng());
  auto src = DeviceAlloc(kBytes);
  auto dst = DeviceAlloc(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(CopyToDevice(*src, host_src.data(), kBytes).ok());
  ASSERT_TRUE(CopyToDevice(*dst, expected.data(), kBytes).ok());
  std::vector<StridedCopy> copies;
  int64_t dst_offset = 0;
  for (int i = 0; i < count; ++i) {
    StridedCopy c;
    c.elem_size = i % 3 == 0 ? 1 : 2;
    c.ndim = 2;
    const int64_t row_elems = i % 2 == 0 ? 1 + static_cast<int64_t>(rng() % 40000)
                                         : 1 + static_cast<int64_t>(rng() % 600);
    c.shape = {i == empty ? 0 : 1 + static_cast<int64_t>(rng() % 24), row_elems};
    c.dst_strides = {row_elems * c.elem_size, c.elem_size};
    c.src_strides = {(row_elems + static_cast<int64_t>(rng() % 64)) * c.elem_size, c.elem_size};
    const int64_t src_offset = static_cast<int64_t>(rng() % (kBytes / 2)) & ~int64_t{15};
    dst_offset += static_cast<int64_t>(rng() % 2) * c.elem_size;  // sometimes not 16-aligned
    c.src = static_cast<unsigned char*>(*src) + src_offset;
    c.dst = static_cast<unsigned char*>(*dst) + dst_offset;
    copies.push_back(c);
    StridedCopy host = c;
    ReferenceCopy(host, host_src.data() + src_offset, expected.data() + dst_offset);
    dst_offset += (c.shape[0] * c.dst_strides[0] + 15) / 16 * 16;
  }
  ASSERT_LT(dst_offset, kBytes);
  ASSERT_TRUE(LaunchBatchedCopy(copies, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  ASSERT_TRUE(CopyToHost(actual.data(), *dst, kBytes).ok());
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), kBytes), 0);
  EXPECT_TRUE(DeviceFree(*src).ok());
  EXPECT_TRUE(DeviceFree(*dst).ok());
}

// 60 copies: their descriptors go in a table in device memory.
TEST_F(BatchedCopyTest, LongAndShortRowsAcrossManyBlocksMatchReference) { CopyLongAndShortRows(60, -1, 11); }

// At most 15 copies travel in the launch's parameters (batched_copy.cu, kInlineCopies): the most
// there, a few with an empty one among them, one, and 16 (a table again).
TEST_F(BatchedCopyTest, CopiesInTheLaunchParametersMatchReference) {
  CopyLongAndShortRows(15, -1, 12);
  CopyLongAndShortRows(5, 2, 13);
  CopyLongAndShortRows(1, -1, 14);
  CopyLongAndShortRows(16, 0, 15);
}

TEST_F(BatchedCopyTest, LargeDenseCopyUsesWideWords) {
  constexpr int64_t kBytes = 64 << 20;
  std::vector<unsigned char> host(kBytes), back(kBytes);
  std::mt19937_64 rng(11);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  auto src = DeviceAlloc(kBytes);
  auto dst = DeviceAlloc(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(CopyToDevice(*src, host.data(), kBytes).ok());
  StridedCopy c;
  c.src = *src;
  c.dst = *dst;
  c.elem_size = 2;
  c.ndim = 2;
  c.shape = {4096, 8192};
  c.src_strides = {8192 * 2, 2};
  c.dst_strides = {8192 * 2, 2};
  ASSERT_TRUE(LaunchBatchedCopy({c}, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  ASSERT_TRUE(CopyToHost(back.data(), *dst, kBytes).ok());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), kBytes), 0);
  EXPECT_TRUE(DeviceFree(*src).ok());
  EXPECT_TRUE(DeviceFree(*dst).ok());
}

// 300 tables (and an empty one), each copying its own 8 KiB of the source into its own 4 KiB of
// the destination in one of three shapes: dense bytes, 4-byte rows with gaps, 2-byte elements of
// a strided matrix. Launched together they take three kernels (128 tables a launch) and match the
// CPU reference.
TEST_F(BatchedCopyTest, TablesLaunchedTogetherMatchReference) {
  constexpr int kTables = 300;
  constexpr int64_t kIn = 8192, kOut = 4096;
  std::vector<unsigned char> host(kTables * kIn), want(kTables * kOut, 0), back(kTables * kOut);
  std::mt19937_64 rng(21);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  auto src = DeviceAlloc(kTables * kIn);
  auto dst = DeviceAlloc(kTables * kOut);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(CopyToDevice(*src, host.data(), kTables * kIn).ok());
  ASSERT_TRUE(CopyToDevice(*dst, want.data(), kTables * kOut).ok());
  std::vector<std::unique_ptr<CopyTable>> owned;
  for (int k = 0; k < kTables; ++k) {
    StridedCopy c;
    c.src = static_cast<unsigned char*>(*src) + k * kIn;
    c.dst = static_cast<unsigned char*>(*dst) + k * kOut;
    if (k % 3 == 0) {
      c.elem_size = 1;
      c.ndim = 1;
      c.shape = {kOut};
      c.src_strides = {1};
      c.dst_strides = {1};
    } else if (k % 3 == 1) {
      c.elem_size = 4;
      c.ndim = 2;
      c.shape = {32, 32};
      c.src_strides = {256, 4};  // 128-byte rows every 256 bytes
      c.dst_strides = {128, 4};
    } else {
      c.elem_size = 2;
      c.ndim = 2;
      c.shape = {16, 96};
      c.src_strides = {384, 2};
      c.dst_strides = {192, 2};
    }
    ReferenceCopy(c, host.data() + k * kIn, want.data() + k * kOut);
    auto table = CopyTable::Upload({c}, nullptr);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    owned.push_back(std::move(*table));
  }
  auto empty = CopyTable::Upload({}, nullptr);
  ASSERT_TRUE(empty.ok());
  std::vector<const CopyTable*> tables;
  for (const auto& t : owned) tables.push_back(t.get());
  tables.insert(tables.begin() + 7, empty->get());
  ASSERT_TRUE(CopyTable::LaunchTogether(tables).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  ASSERT_TRUE(CopyToHost(back.data(), *dst, kTables * kOut).ok());
  EXPECT_EQ(std::memcmp(back.data(), want.data(), back.size()), 0);
  owned.clear();
  empty->reset();
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  EXPECT_TRUE(DeviceFree(*src).ok());
  EXPECT_TRUE(DeviceFree(*dst).ok());
}

TEST(BatchedCopyValidationTest, RejectsBadDescriptorsWithoutAGpu) {
  StridedCopy c;
  c.ndim = 9;
  Status s = LaunchBatchedCopy({c}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::cuda
