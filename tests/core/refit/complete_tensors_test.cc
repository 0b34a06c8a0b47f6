// DestinationWriters (core/refit/complete_tensors.h): a tensor is complete on a rank once every op
// of the rank writing its bytes there completed; writes are found through copy pairs and received
// bytes; a tensor no op writes waits for all of the rank's ops; other ranks' tensors are not held.
#include "core/refit/complete_tensors.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

// Rank 0 holds tensors a and c (fp32 [4] each) back to back in buffer "b" and z (fp32 [2]) in
// buffer "z"; rank 1 holds tensor o. Rank 0's ops: 0 copies into a's bytes, 1 receives into c's,
// 2 writes only staging.
struct Case {
  Layout destination;
  TransferPlan plan;
};

Case MakeCase() {
  Case k;
  Layout& d = k.destination;
  for (const auto& [name, elements] : {std::pair{"a", 4}, std::pair{"c", 4}, std::pair{"z", 2},
                                       std::pair{"o", 4}}) {
    EXPECT_TRUE(d.AddTensor({name, {elements}, DType::kFP32}).ok());
  }
  d.AppendFragment(0, Box::FromShape({4}), 0, "b");
  d.AppendFragment(1, Box::FromShape({4}), 0, "b");
  d.AppendFragment(2, Box::FromShape({2}), 0, "z");
  d.AppendFragment(3, Box::FromShape({4}), 1, "o");
  TransferPlan& p = k.plan;
  p.num_ranks = 2;
  p.destination_buffers = d.buffers;
  Op copy;
  copy.kind = OpKind::kCopy;
  copy.rank = 0;
  p.AddOp(copy, {}, {{Region::Bytes(Space::kStaging, 0, 0, 16), Region::Bytes(Space::kDestination, 0, 0, 16)}});
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.rank = 0;
  recv.peer = 1;
  recv.message = 0;
  recv.SetData(ByteRange(Space::kDestination, 0, 16, 16));
  p.AddOp(recv, {});
  Op staging_only;
  staging_only.kind = OpKind::kCopy;
  staging_only.rank = 0;
  p.AddOp(staging_only, {}, {{Region::Bytes(Space::kStaging, 0, 0, 8), Region::Bytes(Space::kStaging, 1, 0, 8)}});
  Op other;
  other.kind = OpKind::kCopy;
  other.rank = 1;
  p.AddOp(other, {}, {{Region::Bytes(Space::kStaging, 0, 0, 16), Region::Bytes(Space::kDestination, 2, 0, 16)}});
  return k;
}

TEST(DestinationWritersTest, ATensorIsCompleteWhenItsWritersCompleted) {
  const Case k = MakeCase();
  const DestinationWriters w = DestinationWriters::For(k.plan, k.destination, 0);
  EXPECT_EQ(w.Held(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(w.Complete({}), (std::vector<int>{}));
  EXPECT_EQ(w.Complete({0}), (std::vector<int>{0}));
  EXPECT_EQ(w.Complete({1}), (std::vector<int>{1}));
  EXPECT_EQ(w.Complete({1, 0}), (std::vector<int>{0, 1}));
  EXPECT_EQ(w.Complete({0, 1, 2}), (std::vector<int>{0, 1, 2}));  // z once every op completed
  const DestinationWriters other = DestinationWriters::For(k.plan, k.destination, 1);
  EXPECT_EQ(other.Held(), (std::vector<int>{3}));
  EXPECT_EQ(other.Complete({3}), (std::vector<int>{3}));
  EXPECT_EQ(other.Complete({0, 1, 2}), (std::vector<int>{}));
}

// A copy whose span overlaps two tensors' bytes (here one writing bytes 8-23 of buffer b) counts
// as a writer of both: neither is complete until it completes.
TEST(DestinationWritersTest, AWriteAcrossTwoTensorsHoldsBoth) {
  Case k = MakeCase();
  Op straddle;
  straddle.kind = OpKind::kCopy;
  straddle.rank = 0;
  const int id = k.plan.AddOp(
      straddle, {}, {{Region::Bytes(Space::kStaging, 0, 0, 16), Region::Bytes(Space::kDestination, 0, 8, 16)}});
  const DestinationWriters w = DestinationWriters::For(k.plan, k.destination, 0);
  EXPECT_EQ(w.Complete({0, 1}), (std::vector<int>{}));
  EXPECT_EQ(w.Complete({0, 1, id}), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace ferry
