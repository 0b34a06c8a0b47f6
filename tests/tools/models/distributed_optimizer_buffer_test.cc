// Tests for tools/models/distributed_optimizer_buffer: offsets worked by hand from
// megatron/core/optimizer/distrib_optimizer.py _compute_per_buffer_param_layout (reverse order,
// pad_param_start to 64 elements, pad_bucket_end to lcm(dp, 128), shared_embedding buckets).
#include "tools/models/distributed_optimizer_buffer.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace ferry::models {
namespace {

using Span = std::pair<int64_t, int64_t>;

std::vector<Span> Spans(const DistributedOptimizerBuffer& b) {
  std::vector<Span> out;
  for (const auto& s : b.slots) out.push_back({s.start, s.end});
  return out;
}

TEST(DistributedOptimizerBufferTest, OneBucketReversedAndAligned) {
  // named_parameters() A(100), B(30), C(200); dp 3: C at 0, B at pad64(200) = 256, A at
  // pad64(286) = 320, the bucket's end 420 padded to lcm(3, 128) = 384: 768.
  DistributedOptimizerBuffer b =
      LayOutDistributedOptimizerBuffer({{100, false}, {30, false}, {200, false}}, 0, 3).value();
  EXPECT_EQ(Spans(b), (std::vector<Span>{{320, 420}, {256, 286}, {0, 200}}));
  EXPECT_EQ(b.buckets, (std::vector<Span>{{0, 768}}));
  EXPECT_EQ(b.numel, 768);
}

TEST(DistributedOptimizerBufferTest, BucketsCloseAtBucketSize) {
  // bucket_size 250: C ends at 200 (< 250), B ends at 286 (>= 250) and closes bucket 0 at
  // pad(286, 384) = 384; A starts the next bucket at 384 and ends it at 484 -> 768.
  DistributedOptimizerBuffer b =
      LayOutDistributedOptimizerBuffer({{100, false}, {30, false}, {200, false}}, 250, 3).value();
  EXPECT_EQ(Spans(b), (std::vector<Span>{{384, 484}, {256, 286}, {0, 200}}));
  EXPECT_EQ(b.slots[0].bucket, 1);
  EXPECT_EQ(b.slots[1].bucket, 0);
  EXPECT_EQ(b.buckets, (std::vector<Span>{{0, 384}, {384, 768}}));
}

TEST(DistributedOptimizerBufferTest, SharedEmbeddingInABucketOfItsOwn) {
  // named_parameters() E(10, shared_embedding), X(20); dp 1: X at 0; E closes X's bucket at
  // pad64(20) = 64 -> pad(64, 128) = 128, sits at 128 and closes its own at pad(138, 128) = 256.
  DistributedOptimizerBuffer b =
      LayOutDistributedOptimizerBuffer({{10, true}, {20, false}}, 0, 1).value();
  EXPECT_EQ(Spans(b), (std::vector<Span>{{128, 138}, {0, 20}}));
  EXPECT_EQ(b.buckets, (std::vector<Span>{{0, 128}, {128, 256}}));
}

TEST(DistributedOptimizerBufferTest, RejectsBadSizes) {
  EXPECT_FALSE(LayOutDistributedOptimizerBuffer({{10, false}}, 0, 0).ok());
  EXPECT_FALSE(LayOutDistributedOptimizerBuffer({{-1, false}}, 0, 1).ok());
  EXPECT_FALSE(LayOutDistributedOptimizerBuffer({{int64_t{1} << 62, false}}, 0, 1).ok());
}

}  // namespace
}  // namespace ferry::models
