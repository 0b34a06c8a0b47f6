// The first-fit allocator and the plan-order staging layout (core/plan/staging_layout.h), on
// cases worked by hand.
#include "core/plan/staging_layout.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

// An op of `kind` on `rank` in `round` whose data lies in `buffer` of `space` (a message's peer:
// `peer`).
Op StagingOp(OpKind kind, int rank, int round, Space space, int buffer, int peer = -1) {
  Op o;
  o.kind = kind;
  o.rank = rank;
  o.round = round;
  o.peer = peer;
  o.data = {space, buffer, 0};
  return o;
}

TEST(FirstFitAllocatorTest, FirstFitRoundsUpAndRefusesWhatDoesNotFit) {
  FirstFitAllocator a;
  a.Reset(1024);
  EXPECT_EQ(a.Allocate(1), 0);      // rounded up to 256
  EXPECT_EQ(a.Allocate(300), 256);  // rounded up to 512
  EXPECT_EQ(a.in_use(), 768);
  EXPECT_EQ(a.Allocate(512), -1);
  EXPECT_EQ(a.Allocate(256), 768);
}

TEST(FirstFitAllocatorTest, FreedNeighboursMergeIntoOneBlock) {
  FirstFitAllocator a;
  a.Reset(768);
  const int64_t x = a.Allocate(256), y = a.Allocate(256), z = a.Allocate(256);
  a.Free(x);
  a.Free(z);
  EXPECT_EQ(a.Allocate(512), -1);  // two free blocks of 256, not adjacent
  a.Free(y);
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.Allocate(768), 0);
}

// A refused request walks every free block; what it learns must not refuse a block that fits.
TEST(FirstFitAllocatorTest, ARefusalStillGrantsTheLargestFreeBlock) {
  FirstFitAllocator a;
  a.Reset(1024);
  const int64_t x = a.Allocate(512);
  EXPECT_EQ(a.Allocate(256), 512);
  a.Free(x);                         // free: [0, 512) and [768, 1024)
  EXPECT_EQ(a.Allocate(600), -1);
  EXPECT_EQ(a.Allocate(512), 0);
  EXPECT_EQ(a.Allocate(256), 768);
  EXPECT_EQ(a.Allocate(1), -1);      // full
  a.Free(512);                       // one block of 256 in the middle
  EXPECT_EQ(a.Allocate(256), 512);
}

// A rank that quantizes received rows (planner/block_quantize.cc): two receives (slots A, B),
// each unpacked into the bf16 twins of the matrices it feeds (T1..T4), and a quantize per twin.
// Plan order: recv A, unpack A (-> T1, T2, T3), recv B, unpack B (-> T1, T4), the quantizes.
// In 256-byte units and positions in that order: A 311 units [0, 1], T1 350 [1, 4], T2 132 [1, 5],
// T3 132 [1, 6], B 437 [2, 3], T4 132 [3, 7]. Largest first: B at 0; T1 clears B: 437; A overlaps
// only T1 and fits below it: 0; T2 clears A, B, T1: 787; T3: 919; T4 clears B, T1, T2, T3: 1051.
// The extent, 1183 units, is what is live at position 3 (B, T1..T4): no layout can do with less.
struct QuantizingRank {
  enum { A, B, T1, T2, T3, T4 };
  std::vector<int64_t> bytes = {79400, 111620, 89600, 33540, 33540, 33540};
  std::vector<int> round = std::vector<int>(8, 1);
  std::vector<std::vector<int>> dependents = {{1}, {4, 5, 6}, {3}, {4, 7}, {}, {}, {}, {}};
  std::vector<std::vector<int>> slots = {{A}, {A, T1, T2, T3}, {B}, {B, T1, T4}, {T1}, {T2}, {T3}, {T4}};
};

TEST(StagingLayoutTest, PlacesTheLargestSlotsFirstClearOfThoseLiveAtTheSameTime) {
  QuantizingRank r;
  Result<StagingLayout> layout =
      LayOutStagingInPlanOrder(r.round, r.dependents, r.slots, [&](int s) { return r.bytes[static_cast<size_t>(s)]; });
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(layout->offset.at(QuantizingRank::B), 0);
  EXPECT_EQ(layout->offset.at(QuantizingRank::T1), 437 * 256);
  EXPECT_EQ(layout->offset.at(QuantizingRank::A), 0);
  EXPECT_EQ(layout->offset.at(QuantizingRank::T2), 787 * 256);
  EXPECT_EQ(layout->offset.at(QuantizingRank::T3), 919 * 256);
  EXPECT_EQ(layout->offset.at(QuantizingRank::T4), 1051 * 256);
  EXPECT_EQ(layout->extent, 1183 * 256);
}

// Past 20,000 slots a rank's slots are placed first fit as plan order takes and frees them: here
// the same rank followed by 20,000 one-unit slots, each used by one op of a chain after the
// quantizes. First fit: A at 0; T1 at 311, T2 at 661, T3 at 793; A freed; B fits in no hole: 925;
// T4 in A's hole at 0; the small slots then reuse offset 0. Extent 925 + 437 units.
TEST(StagingLayoutTest, PlacesFirstFitInPlanOrderWhenARankHasVeryManySlots) {
  QuantizingRank r;
  const int extra = 20000;
  for (int k = 0; k < extra; ++k) {
    const int op = static_cast<int>(r.round.size());
    r.dependents[static_cast<size_t>(op - 1)].push_back(op);
    r.round.push_back(1);
    r.dependents.emplace_back();
    r.slots.push_back({static_cast<int>(r.bytes.size())});
    r.bytes.push_back(1);
  }
  Result<StagingLayout> layout =
      LayOutStagingInPlanOrder(r.round, r.dependents, r.slots, [&](int s) { return r.bytes[static_cast<size_t>(s)]; });
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->offset.at(QuantizingRank::B), 925 * 256);
  EXPECT_EQ(layout->offset.at(QuantizingRank::T4), 0);
  EXPECT_EQ(layout->offset.at(6 + extra - 1), 0);
  EXPECT_EQ(layout->extent, (925 + 437) * 256);
}

// The cache returns its layout again for equal inputs, and lays out anew when a slot's size or an
// op's slots change.
TEST(StagingLayoutCacheTest, KeepsTheLayoutWhileTheInputsStayEqual) {
  QuantizingRank r;
  StagingLayoutCache cache;
  auto bytes = [&](int s) { return r.bytes[static_cast<size_t>(s)]; };
  Result<StagingLayout> first = cache.LayOut(r.round, r.dependents, r.slots, bytes);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->extent, 1183 * 256);
  Result<StagingLayout> again = cache.LayOut(r.round, r.dependents, r.slots, bytes);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->offset, first->offset);
  // Each change must give the fresh layout of the new inputs, which differs from the last one.
  auto expect_fresh = [&](const std::string& change, const StagingLayout& before) {
    Result<StagingLayout> cached = cache.LayOut(r.round, r.dependents, r.slots, bytes);
    Result<StagingLayout> fresh = LayOutStagingInPlanOrder(r.round, r.dependents, r.slots, bytes);
    ASSERT_TRUE(cached.ok() && fresh.ok()) << change;
    EXPECT_EQ(cached->offset, fresh->offset) << change;
    EXPECT_EQ(cached->extent, fresh->extent) << change;
    EXPECT_NE(fresh->offset, before.offset) << change;
  };
  r.bytes[QuantizingRank::B] = 256;  // B shrinks to one unit
  expect_fresh("B's size", *first);
  const StagingLayout shrunk = *cache.LayOut(r.round, r.dependents, r.slots, bytes);
  r.slots[2] = {QuantizingRank::T4};  // recv B lands in T4's slot: T4 lives from position 2
  expect_fresh("recv B's slot", shrunk);
}

// Rounds come first, then the index; an op waits for its dependencies whatever its round.
TEST(StagingLayoutTest, PlanOrderIsRoundThenIndexAmongReadyOps) {
  const std::vector<int> round = {2, 0, 1, 0};
  const std::vector<std::vector<int>> dependents = {{}, {}, {3}, {}};  // op 3 waits for op 2
  const std::vector<std::vector<int>> slots(4);
  Result<StagingLayout> layout = LayOutStagingInPlanOrder(round, dependents, slots, [](int) { return 0; });
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->order, (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(layout->extent, 0);
}

TEST(StagingLayoutTest, RefusesACycle) {
  const std::vector<std::vector<int>> dependents = {{1}, {0}, {}};
  Result<StagingLayout> layout =
      LayOutStagingInPlanOrder({0, 0, 0}, dependents, std::vector<std::vector<int>>(3), [](int) { return 0; });
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("2 ops wait on each other in a cycle"), std::string::npos);
}

// Rank 0 packs two messages into slots of 1000 and 3000 bytes and sends each; rank 1 receives
// both into one slot of 5000 bytes and unpacks. Rank 0 in plan order: pack 1 (4 units at 0), send
// 1 (frees them), pack 2 (12 units at 0): 12 units. Rank 1: 20 units. The plan needs 20 units.
TEST(StagingLayoutTest, APlanNeedsTheLargestRanksLayout) {
  TransferPlan plan;
  const int s1 = plan.AddSlot(0, 1000), s2 = plan.AddSlot(0, 3000), r = plan.AddSlot(1, 5000);
  const Region src{Space::kSource, 0, 0, DType::kUInt8, 1, {1000}, {1}};
  const Region to_s1{Space::kStaging, s1, 0, DType::kUInt8, 1, {1000}, {1}};
  const Region to_s2{Space::kStaging, s2, 0, DType::kUInt8, 1, {1000}, {1}};
  const int pack1 = plan.AddOp(StagingOp(OpKind::kPack, 0, 0, Space::kStaging, 0), {}, {{src, to_s1}});
  plan.AddOp(StagingOp(OpKind::kSend, 0, 0, Space::kStaging, s1), {pack1});
  const int pack2 = plan.AddOp(StagingOp(OpKind::kPack, 0, 1, Space::kStaging, 0), {}, {{src, to_s2}});
  plan.AddOp(StagingOp(OpKind::kSend, 0, 1, Space::kStaging, s2), {pack2});
  const int recv = plan.AddOp(StagingOp(OpKind::kRecv, 1, 0, Space::kStaging, r), {});
  const Region from_r{Space::kStaging, r, 0, DType::kUInt8, 1, {1000}, {1}};
  const Region dst{Space::kDestination, 0, 0, DType::kUInt8, 1, {1000}, {1}};
  plan.AddOp(StagingOp(OpKind::kUnpack, 1, 0, Space::kStaging, 0), {recv}, {{from_r, dst}});
  Result<int64_t> needed = PlanOrderStagingBytes(plan);
  ASSERT_TRUE(needed.ok()) << needed.status().ToString();
  EXPECT_EQ(*needed, 20 * 256);
  plan.slots.pop_back();
  Result<int64_t> broken = PlanOrderStagingBytes(plan);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("uses a staging slot the plan lacks"), std::string::npos);
}

// Ops of two ranks interleaved in the plan: each rank's local indices follow plan order, its
// dependents and slots are by local index (each slot once), and a dep on the other rank's op is
// refused by name.
TEST(StagingOpsByRankTest, GathersEachRanksOpsByLocalIndex) {
  TransferPlan plan;
  plan.num_ranks = 2;
  const int a = plan.AddSlot(0, 100), b = plan.AddSlot(1, 200);
  const Region src{Space::kSource, 0, 0, DType::kUInt8, 1, {100}, {1}};
  const Region in_a{Space::kStaging, a, 0, DType::kUInt8, 1, {100}, {1}};
  const int pack = plan.AddOp(StagingOp(OpKind::kPack, 0, 3, Space::kStaging, 0), {}, {{src, in_a}, {src, in_a}});
  const int recv = plan.AddOp(StagingOp(OpKind::kRecv, 1, 4, Space::kStaging, b, 0), {});
  plan.AddOp(StagingOp(OpKind::kSend, 0, 5, Space::kStaging, a, 1), {pack});
  const Region from_b{Space::kStaging, b, 0, DType::kUInt8, 1, {100}, {1}};
  const Region dst{Space::kDestination, 0, 0, DType::kUInt8, 1, {100}, {1}};
  plan.AddOp(StagingOp(OpKind::kUnpack, 1, 6, Space::kStaging, 0), {recv}, {{from_b, dst}});
  plan.AddOp(StagingOp(OpKind::kCopy, 1, 7, Space::kStaging, 0), {recv});
  Result<std::vector<RankStagingOps>> ranks = StagingOpsByRank(plan);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_EQ(ranks->size(), 2u);
  const RankStagingOps& r0 = (*ranks)[0];
  const RankStagingOps& r1 = (*ranks)[1];
  EXPECT_EQ(r0.ids, (std::vector<int>{0, 2}));
  EXPECT_EQ(r0.round, (std::vector<int>{3, 5}));
  EXPECT_EQ(r0.dependents_begin, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(r0.dependents, (std::vector<int>{1}));
  EXPECT_EQ(r0.slots_begin, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r0.slots, (std::vector<int>{a, a}));
  EXPECT_EQ(r1.ids, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(r1.round, (std::vector<int>{4, 6, 7}));
  EXPECT_EQ(r1.dependents_begin, (std::vector<int>{0, 2, 2, 2}));
  EXPECT_EQ(r1.dependents, (std::vector<int>{1, 2}));
  EXPECT_EQ(r1.slots_begin, (std::vector<int>{0, 1, 2, 2}));
  EXPECT_EQ(r1.slots, (std::vector<int>{b, b}));
  plan.AddOp(StagingOp(OpKind::kCopy, 1, 8, Space::kStaging, 0), {pack});
  Result<std::vector<RankStagingOps>> crossing = StagingOpsByRank(plan);
  ASSERT_FALSE(crossing.ok());
  EXPECT_NE(crossing.status().message().find("op 5 depends on op 0 of another rank"), std::string::npos);
}

}  // namespace
}  // namespace ferry
