// CopyPool: small copies run inline, large ones as tasks on the workers, reported once per op.
#include "core/runtime/copy_pool.h"

#include <vector>

#include <gtest/gtest.h>

namespace ferry {
namespace {

// A dense uint8 copy of `bytes` bytes.
CopyGeometry Dense(int64_t bytes) {
  Region r;
  r.dtype = DType::kUInt8;
  r.ndim = 1;
  r.shape = {bytes};
  r.strides = {1};
  return MakeCopyGeometry(r, r).value();
}

TEST(CopyPoolTest, SmallCopiesRunInline) {
  CopyPool pool(2);
  std::vector<char> from(1000, 7), to(1000, 0);
  std::vector<CopyGeometry> geometries = {Dense(1000)};
  std::vector<CopyEnds> ends = {{from.data(), to.data(), 0}};
  std::vector<CopyItem> items;
  auto done = pool.Start(/*op=*/3, geometries, ends, 1000, items);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  EXPECT_EQ(to, from);
}

TEST(CopyPoolTest, LargeCopiesRunOnTheWorkersAndAreReportedOnce) {
  CopyPool pool(2);
  const int64_t bytes = 8 << 20;
  std::vector<char> from(bytes), to(bytes, 0);
  for (int64_t i = 0; i < bytes; ++i) from[i] = static_cast<char>(i * 31);
  std::vector<CopyGeometry> geometries = {Dense(bytes)};
  std::vector<CopyEnds> ends = {{from.data(), to.data(), 0}};
  std::vector<CopyItem> items;
  auto done = pool.Start(/*op=*/5, geometries, ends, bytes, items);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_FALSE(*done);
  while (pool.RunOne()) {
  }
  std::vector<std::pair<int, Status>> reported;
  for (int tries = 0; tries < 1000 && reported.empty(); ++tries) {
    reported = pool.Done(std::chrono::microseconds(10000));
  }
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].first, 5);
  EXPECT_TRUE(reported[0].second.ok()) << reported[0].second.ToString();
  EXPECT_EQ(to, from);
  pool.Drain();
  EXPECT_TRUE(pool.Done(std::chrono::microseconds(0)).empty());
}

}  // namespace
}  // namespace ferry
