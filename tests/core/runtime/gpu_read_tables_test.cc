// GpuReadTables (core/runtime/gpu_read_tables.h) on a real device: a read's work is uploaded
// once and launched again while its regions stay at the same addresses, rebuilt when an address
// or the analysis changes, and what a launch copies is what the description says. Needs a GPU:
// where there is none the tests report themselves SKIPPED.
#include "core/runtime/gpu_read_tables.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/cuda/batched_copy.h"

namespace ferry {
namespace {

class GpuReadTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
    auto stream = cuda::CopyStream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    gpu_ = std::move(*stream);
    for (void** p : {&a_, &b_, &c_}) {
      auto alloc = cuda::DeviceAlloc(kBytes);
      ASSERT_TRUE(alloc.ok());
      *p = *alloc;
    }
  }
  void TearDown() override {
    tables_.Clear();
    gpu_.reset();
    for (void* p : {a_, b_, c_}) {
      if (p != nullptr) {
        ASSERT_TRUE(cuda::DeviceFree(p).ok());
      }
    }
  }

  // Fills `p` with bytes value + index.
  static void Fill(void* p, uint8_t value) {
    std::vector<uint8_t> host(kBytes);
    for (int64_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(value + i);
    ASSERT_TRUE(cuda::CopyToDevice(p, host.data(), kBytes).ok());
  }
  static std::vector<uint8_t> Read(const void* p) {
    std::vector<uint8_t> host(kBytes);
    EXPECT_TRUE(cuda::CopyToHost(host.data(), p, kBytes).ok());
    return host;
  }
  // The whole of `from` copied to `to` as one contiguous region.
  const cuda::WorkTables* Find(uint64_t generation, const void* from, void* to) {
    std::vector<CopyEnds> ends{{static_cast<const char*>(from), static_cast<char*>(to), 0}};
    auto describe = [&](std::vector<cuda::StridedCopy>& copies, std::vector<cuda::StridedConvert>&) {
      cuda::StridedCopy c;
      c.src = from;
      c.dst = to;
      c.shape[0] = kBytes;
      c.src_strides[0] = c.dst_strides[0] = 1;
      copies.push_back(c);
      return Status::Ok();
    };
    auto found = tables_.Find(generation, 0, ends, describe, *gpu_);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return found.ok() ? *found : nullptr;
  }
  void LaunchAndWait(const cuda::WorkTables* t) {
    std::vector<const cuda::WorkTables*> list{t};
    auto ticket = gpu_->Launch(list, {}, {});
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    while (true) {
      auto done = gpu_->Finished(*ticket);
      ASSERT_TRUE(done.ok()) << done.status().ToString();
      if (*done) break;
    }
  }

  static constexpr int64_t kBytes = 1 << 20;
  std::unique_ptr<cuda::CopyStream> gpu_;
  GpuReadTables tables_;
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* c_ = nullptr;
};

TEST_F(GpuReadTablesTest, SameAddressesReuseTheUploadedWorkAndCopyTheCurrentBytes) {
  Fill(a_, 1);
  const cuda::WorkTables* first = Find(7, a_, b_);
  LaunchAndWait(first);
  EXPECT_EQ(Read(b_), Read(a_));
  Fill(a_, 9);  // the next refit's weights
  const cuda::WorkTables* again = Find(7, a_, b_);
  EXPECT_EQ(again, first);
  EXPECT_EQ(tables_.uploads(), 1);
  LaunchAndWait(again);
  EXPECT_EQ(Read(b_), Read(a_));
}

TEST_F(GpuReadTablesTest, AMovedDestinationOrANewAnalysisIsDescribedAgain) {
  Fill(a_, 3);
  Fill(c_, 0);
  Find(7, a_, b_);
  LaunchAndWait(Find(7, a_, c_));  // the destination moved: c, not b, receives the bytes
  EXPECT_EQ(tables_.uploads(), 2);
  EXPECT_EQ(Read(c_), Read(a_));
  Find(8, a_, c_);  // another plan's analysis: its own tables
  EXPECT_EQ(tables_.uploads(), 3);
}

}  // namespace
}  // namespace ferry
