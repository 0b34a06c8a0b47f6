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
  TinyPlan u = MakeTinyPlan();
  u.plan.ops[u.recv].bytes = 8;
  u.plan.ops[u.recv].data.bytes = 8;
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
