// Tests the box checksums: the CPU reference against a case worked by hand from the definition in
// core/base/checksum_term.h (runs everywhere), and the GPU kernel against the CPU reference on
// random strided boxes (skipped, visibly, where no GPU is present).
#include "core/cuda/box_checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/base/checksum_term.h"

namespace ferry::cuda {
namespace {

// A 2x2 box of uint16 elements in rows of 3: elements 0, 1, 3 and 4 of the buffer, in that order.
StridedCopy TwoByTwoOfThree(const uint16_t* base) {
  StridedCopy box;
  box.src = base;
  box.ndim = 2;
  box.elem_size = 2;
  box.shape[0] = 2;
  box.shape[1] = 2;
  box.src_strides[0] = 3 * 2;
  box.src_strides[1] = 2;
  return box;
}

TEST(HostBoxChecksumTest, SumsOneTermPerElementInRowMajorOrder) {
  const uint16_t buffer[6] = {0x1234, 0xbeef, 0xffff, 0x0001, 0x8000, 0x7777};
  const uint64_t expected = BoxChecksumTerm(0, 0x1234) + BoxChecksumTerm(1, 0xbeef) +
                            BoxChecksumTerm(2, 0x0001) + BoxChecksumTerm(3, 0x8000);
  EXPECT_EQ(HostBoxChecksum(TwoByTwoOfThree(buffer)), expected);
}

TEST(HostBoxChecksumTest, WrongOrSwappedElementsChangeTheSum) {
  uint16_t buffer[6] = {0x1234, 0xbeef, 0xffff, 0x0001, 0x8000, 0x7777};
  const uint64_t good = HostBoxChecksum(TwoByTwoOfThree(buffer));
  buffer[2] ^= 0x0100;  // outside the box: no change
  EXPECT_EQ(HostBoxChecksum(TwoByTwoOfThree(buffer)), good);
  buffer[4] ^= 0x0100;  // one bit of one element inside
  EXPECT_NE(HostBoxChecksum(TwoByTwoOfThree(buffer)), good);
  buffer[4] ^= 0x0100;
  std::swap(buffer[0], buffer[1]);  // the same values in other places
  EXPECT_NE(HostBoxChecksum(TwoByTwoOfThree(buffer)), good);
}

TEST(BoxChecksumsTest, RejectsBadBoxesBeforeTouchingTheDevice) {
  const uint16_t buffer[6] = {};
  StridedCopy box = TwoByTwoOfThree(buffer);
  box.elem_size = 3;
  Result<std::vector<uint64_t>> bad = BoxChecksums({TwoByTwoOfThree(buffer), box}, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("box checksum 1: element of 3 bytes"), std::string::npos)
      << bad.status().message();
  box = TwoByTwoOfThree(buffer);
  box.ndim = 9;
  EXPECT_FALSE(BoxChecksums({box}, nullptr).ok());
}

class BoxChecksumGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
    std::printf("running on %s\n", DeviceName(0).c_str());
  }
};

// A random box of up to 4 dims at `offset` (it spans at most 512 KiB), sometimes strided, sometimes
// at an address not aligned to its element size.
StridedCopy RandomBox(std::mt19937_64& rng, int64_t offset) {
  StridedCopy box;
  box.elem_size = int64_t{1} << (rng() % 4);
  box.ndim = 1 + static_cast<int>(rng() % 4);
  int64_t dense = box.elem_size;
  for (int d = box.ndim - 1; d >= 0; --d) {
    box.shape[d] = static_cast<int64_t>(rng() % 9);
    box.src_strides[d] = dense * (1 + static_cast<int64_t>(rng() % 2));
    dense = box.src_strides[d] * std::max<int64_t>(box.shape[d], 1);
  }
  box.src = reinterpret_cast<const void*>(offset + static_cast<int64_t>(rng() % 3));
  return box;
}

// Rebases a box whose `src` holds an offset onto `base`.
StridedCopy At(StridedCopy box, const void* base) {
  box.src = static_cast<const char*>(base) + reinterpret_cast<intptr_t>(box.src);
  return box;
}

TEST_F(BoxChecksumGpuTest, RandomStridedBoxesMatchTheCpuReference) {
  constexpr int64_t kSlot = 64 << 10;
  constexpr int kBoxes = 200;
  std::mt19937_64 rng(11);
  std::vector<unsigned char> host(kSlot * kBoxes + (1 << 20));
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  Result<void*> device = DeviceAlloc(static_cast<int64_t>(host.size()));
  ASSERT_TRUE(device.ok());
  ASSERT_TRUE(CopyToDevice(*device, host.data(), static_cast<int64_t>(host.size())).ok());
  std::vector<StridedCopy> on_host, on_device;
  for (int i = 0; i < kBoxes; ++i) {
    const StridedCopy box = RandomBox(rng, i * kSlot);
    on_host.push_back(At(box, host.data()));
    on_device.push_back(At(box, *device));
  }
  // One box of several blocks: 1M bf16 elements, every other column of a 1024 x 2048 matrix.
  StridedCopy large;
  large.ndim = 2;
  large.elem_size = 2;
  large.shape = {1024, 1024};
  large.src_strides = {4096, 4};
  large.src = reinterpret_cast<const void*>(int64_t{0});
  on_host.push_back(At(large, host.data()));
  on_device.push_back(At(large, *device));

  Result<std::vector<uint64_t>> sums = BoxChecksums(on_device, nullptr);
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  ASSERT_EQ(sums->size(), on_host.size());
  for (size_t i = 0; i < on_host.size(); ++i) {
    EXPECT_EQ((*sums)[i], HostBoxChecksum(on_host[i])) << "box " << i;
  }
  ASSERT_TRUE(DeviceFree(*device).ok());
}

TEST_F(BoxChecksumGpuTest, OneFlippedByteOnTheDeviceChangesOnlyItsBox) {
  std::vector<uint32_t> host(4096);
  std::mt19937 rng(5);
  for (auto& v : host) v = rng();
  Result<void*> device = DeviceAlloc(static_cast<int64_t>(host.size() * 4));
  ASSERT_TRUE(device.ok());
  ASSERT_TRUE(CopyToDevice(*device, host.data(), static_cast<int64_t>(host.size() * 4)).ok());
  std::vector<StridedCopy> halves(2);
  for (int h = 0; h < 2; ++h) {
    halves[h].src = static_cast<const char*>(*device) + h * 8192;
    halves[h].elem_size = 4;
    halves[h].shape[0] = 2048;
    halves[h].src_strides[0] = 4;
  }
  Result<std::vector<uint64_t>> before = BoxChecksums(halves, nullptr);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  const unsigned char flipped = static_cast<unsigned char>(reinterpret_cast<unsigned char*>(host.data())[10000] ^ 0x20);
  ASSERT_TRUE(CopyToDevice(static_cast<char*>(*device) + 10000, &flipped, 1).ok());
  Result<std::vector<uint64_t>> after = BoxChecksums(halves, nullptr);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*after)[0], (*before)[0]);
  EXPECT_NE((*after)[1], (*before)[1]);
  ASSERT_TRUE(DeviceFree(*device).ok());
}

}  // namespace
}  // namespace ferry::cuda
