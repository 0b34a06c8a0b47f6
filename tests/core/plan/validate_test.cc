// ValidatePlan: accepts a correct plan and rejects each kind of broken one with a clear message.
#include "core/plan/validate.h"

#include <gtest/gtest.h>

#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

void ExpectInvalid(const TinyPlan& t, const std::string& fragment) {
  Status s = ValidatePlan(t.plan, t.source, t.destination);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
}

TEST(ValidatePlan, AcceptsTinyPlan) {
  TinyPlan t = MakeTinyPlan();
  EXPECT_TRUE(ValidatePlan(t.plan, t.source, t.destination).ok());
}

// Element functions run in Convert ops, neg_exp from a wide float into fp32 only.
TEST(ValidatePlan, RejectsAnElementFunctionOutsideAConvertOrIntoAnotherDtype) {
  TinyPlan t = MakeTinyPlan();
  CopyPair c = t.plan.Copies(t.plan.ops[t.unpack])[0];
  c.from.dtype = c.to.dtype = DType::kFP32;
  c.from.shape[0] = c.to.shape[0] = 4;
  c.fn = ElementFn::kNegExp;
  t.plan.SetCopies(t.unpack, {c});
  ExpectInvalid(t, "copy applies neg_exp from fp32 to fp32; element functions run in Convert ops");
  t.plan.ops[t.unpack].kind = OpKind::kConvert;
  EXPECT_TRUE(ValidatePlan(t.plan, t.source, t.destination).ok());
  c.from.dtype = c.to.dtype = DType::kInt32;
  t.plan.SetCopies(t.unpack, {c});
  ExpectInvalid(t, "copy applies neg_exp from int32 to int32");
}

TEST(ValidatePlan, RejectsMissingWrite) {
  TinyPlan t = MakeTinyPlan();
  CopyPair c = t.plan.Copies(t.plan.ops[t.unpack])[0];
  c.from.shape[0] = 12;
  c.to.shape[0] = 12;
  t.plan.SetCopies(t.unpack, {c});
  ExpectInvalid(t, "never written");
}

TEST(ValidatePlan, RejectsDoubleWrite) {
  TinyPlan t = MakeTinyPlan();
  const CopyPair first = t.plan.Copies(t.plan.ops[t.unpack])[0];
  t.plan.SetCopies(t.unpack, {first, first});
  ExpectInvalid(t, "written twice");
}

TEST(ValidatePlan, RejectsUnmatchedRecvAndSizeMismatch) {
  TinyPlan t = MakeTinyPlan();
  t.plan.ops[t.recv].message = 5;
  ExpectInvalid(t, "endpoints");
  TinyPlan negative = MakeTinyPlan();
  negative.plan.ops[negative.send].message = -1;
  negative.plan.ops[negative.recv].message = -1;
  ExpectInvalid(negative, "message id -1 is negative");
  TinyPlan u = MakeTinyPlan();
  u.plan.ops[u.recv].bytes = 8;
  ExpectInvalid(u, "receives 8");
}

TEST(ValidatePlan, RejectsCycleAndForeignDeps) {
  TinyPlan t = MakeTinyPlan();
  t.plan.SetDeps(t.recv, {t.unpack});
  ExpectInvalid(t, "cycle");
  TinyPlan u = MakeTinyPlan();
  u.plan.SetDeps(u.unpack, {u.send});
  ExpectInvalid(u, "another rank");
}

TEST(ValidatePlan, RejectsDepAndCopyRangesOutsideThePlanLists) {
  TinyPlan t = MakeTinyPlan();
  t.plan.ops[t.unpack].copies_end = static_cast<int>(t.plan.copies.size()) + 1;
  ExpectInvalid(t, "outside the plan's copy list");
  TinyPlan u = MakeTinyPlan();
  u.plan.ops[u.unpack].deps_begin = -1;
  ExpectInvalid(u, "outside the plan's dep list");
}

TEST(ValidatePlan, RejectsOutOfRangeRegionsAndRanks) {
  TinyPlan t = MakeTinyPlan();
  CopyPair c = t.plan.Copies(t.plan.ops[t.unpack])[0];
  c.to.offset = 4;
  t.plan.SetCopies(t.unpack, {c});
  ExpectInvalid(t, "outside");
  TinyPlan u = MakeTinyPlan();
  u.plan.num_ranks = 1;
  ExpectInvalid(u, "outside [0, 1)");
}

// Rank 0 sends its 16 source bytes to rank 1, which receives them straight into its destination
// replica and forwards them from there to rank 2 (received straight into its replica as well).
struct RelayPlan {
  Layout source, destination;
  TransferPlan plan;
  int recv1 = 0, forward = 0;
};

RelayPlan MakeRelayPlan() {
  RelayPlan t;
  const int a = t.source.AddTensor({"a", {4}, DType::kFP32}).value();
  t.source.AppendFragment(a, Box::FromShape({4}), 0, "a");
  const int b = t.destination.AddTensor({"a", {4}, DType::kFP32}).value();
  t.destination.AppendFragment(b, Box::FromShape({4}), 1, "a");
  t.destination.AppendFragment(b, Box::FromShape({4}), 2, "a");
  t.plan.num_ranks = 3;
  t.plan.source_buffers = t.source.buffers;
  t.plan.destination_buffers = t.destination.buffers;
  auto message = [&](OpKind kind, int rank, int peer, int64_t id, ByteRange data) {
    Op op;
    op.kind = kind;
    op.rank = rank;
    op.peer = peer;
    op.message = id;
    op.bytes = 16;
    op.link = LinkClass::kNetwork;
    op.SetData(data);
    return op;
  };
  t.plan.AddOp(message(OpKind::kSend, 0, 1, 0, ByteRange(Space::kSource, 0, 0, 16)));
  t.recv1 = t.plan.AddOp(message(OpKind::kRecv, 1, 0, 0, ByteRange(Space::kDestination, 0, 0, 16)));
  t.forward = t.plan.AddOp(
      message(OpKind::kForward, 1, 2, 1, ByteRange(Space::kDestination, 0, 0, 16)), {t.recv1});
  t.plan.AddOp(message(OpKind::kRecv, 2, 1, 1, ByteRange(Space::kDestination, 1, 0, 16)));
  return t;
}

TEST(ValidatePlan, ForwardRelaysWhatItsRecvLandedEvenInADestinationRegion) {
  RelayPlan t = MakeRelayPlan();
  EXPECT_TRUE(ValidatePlan(t.plan, t.source, t.destination).ok());

  const std::string error = "forwards bytes that no Recv it depends on received";
  RelayPlan unordered = MakeRelayPlan();
  unordered.plan.SetDeps(unordered.forward, {});
  Status s = ValidatePlan(unordered.plan, unordered.source, unordered.destination);
  EXPECT_NE(s.message().find(error), std::string::npos) << s.ToString();

  RelayPlan elsewhere = MakeRelayPlan();
  elsewhere.plan.ops[elsewhere.forward].SetData(ByteRange(Space::kDestination, 0, 4, 12));
  for (Op& op : elsewhere.plan.ops) {
    if (op.message == 1) op.bytes = 12;
  }
  s = ValidatePlan(elsewhere.plan, elsewhere.source, elsewhere.destination);
  EXPECT_NE(s.message().find(error), std::string::npos) << s.ToString();
}

TEST(RegionRuns, CollapsesDenseDimsAndSplitsStrided) {
  Region r;
  r.dtype = DType::kFP32;
  r.ndim = 2;
  r.shape = {3, 4};
  r.strides = {4, 1};
  std::vector<ByteRun> runs;
  AppendRegionRuns(r, runs);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].length, 48);
  r.strides = {8, 1};  // every other row of a wider matrix
  runs.clear();
  AppendRegionRuns(r, runs);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].offset, 32);
  EXPECT_EQ(runs[1].length, 16);
}

}  // namespace
}  // namespace ferry
