// Plans into tensors the destination stores through an element function
// (planner/element_transforms.h), worked by hand from vLLM's loader: Megatron keeps a Mamba
// mixer's A_log as the checkpoint does, split by head over TP (megatron/core/ssm/mamba_mixer.py),
// vLLM keeps A = -exp(A_log) in fp32 (vllm/model_executor/layers/mamba/mamba_mixer2.py,
// composed_weight_loader(sharded_weight_loader(0), lambda x: -torch.exp(x.float()))). The wire
// carries A_log in bf16, one Convert op on the destination rank applies neg_exp, the plan
// validates, and running it gives the fp32 values of -e^x computed from the formula. Transforms
// the planner has no function for stay refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/host_run_testutil.h"

namespace ferry {
namespace {

using ::ferry::testing::HostRun;

const char* kName = "backbone.layers.0.mixer.A_log";

// Megatron TP2: A_log [4] of `dtype`, heads [0, 2) on rank 0 and [2, 4) on rank 1.
Layout MegatronTp2(DType dtype = DType::kBF16) {
  Layout l;
  const int t = l.AddTensor({kName, {4}, dtype}).value();
  l.AppendFragment(t, Box::Make({0}, {2}).value(), 0, "A_log");
  l.AppendFragment(t, Box::Make({2}, {4}).value(), 1, "A_log");
  return l;
}

// vLLM TP1 on `rank`: buffer "A" holds the 4 heads as fp32 -exp(A_log).
Layout VllmTp1(int rank, const std::string& transform = "A = -exp(A_log)", DType stored = DType::kFP32) {
  Layout l;
  const int t = l.AddTensor({kName, {4}, DType::kBF16}).value();
  l.PlaceFragment(t, Box::FromShape({4}), rank, "A", 0, RowMajorStrides({4}));
  l.buffers.SetBytes(static_cast<size_t>(l.FindBuffer(rank, "A")), 4 * DTypeSize(stored));
  l.transforms.push_back({t, transform, stored});
  return l;
}

// A_log per head: 0, 1, -2, +inf as bf16 bits; vLLM's A for them, as fp32 bits worked by hand:
// -e^0 = -1, -e^1 = -2.71828174591064453125 (the fp32 nearest to -e), -e^-2 =
// -0.1353352814912796, -e^inf = -inf.
constexpr uint16_t kALog[4] = {0x0000, 0x3f80, 0xc000, 0x7f80};
constexpr uint32_t kA[4] = {0xbf800000u, 0xc02df854u, 0xbe0a9555u, 0xff800000u};

// Runs `plan` with the source's heads holding kALog and checks rank `rank`'s "A" holds kA.
void RunAndCheck(const TransferPlan& plan, const Layout& src, const Layout& dst, int rank) {
  HostRun run(plan);
  for (const Fragment f : src.fragments) {
    std::memcpy(run.source[static_cast<size_t>(f.loc.buffer)].data(), &kALog[f.box.lo[0]], 4);
  }
  run.Run(plan);
  const std::vector<uint8_t>& a = run.destination[static_cast<size_t>(dst.FindBuffer(rank, "A"))];
  ASSERT_EQ(a.size(), 16u);
  for (int head = 0; head < 4; ++head) {
    uint32_t bits;
    std::memcpy(&bits, a.data() + 4 * head, 4);
    EXPECT_EQ(bits, kA[head]) << "head " << head;
  }
}

TEST(ElementTransformPlanTest, SendsALogInBf16AndConvertsOnTheDestinationRank) {
  const Layout src = MegatronTp2(), dst = VllmTp1(2);
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(3, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TransferPlan& plan = r->plan;
  ASSERT_TRUE(ValidatePlan(plan, src, dst).ok()) << ValidatePlan(plan, src, dst).ToString();
  EXPECT_EQ(plan.destination_buffers.size(), dst.buffers.size());
  std::vector<int> recvs;
  const Op* convert = nullptr;
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kSend) {
      EXPECT_EQ(op.bytes, 4) << "two bf16 heads per source rank";
    }
    if (op.kind == OpKind::kRecv) recvs.push_back(op.id);
    if (op.kind == OpKind::kConvert) {
      ASSERT_EQ(convert, nullptr) << "one Convert op";
      convert = &op;
    }
  }
  ASSERT_EQ(recvs.size(), 2u);
  ASSERT_NE(convert, nullptr);
  EXPECT_EQ(convert->rank, 2);
  ASSERT_EQ(convert->NumCopies(), 1);
  const CopyPair pair = plan.Copy(convert->copies_begin);
  EXPECT_EQ(pair.fn, ElementFn::kNegExp);
  EXPECT_EQ(pair.from.space, Space::kStaging);
  EXPECT_EQ(pair.from.dtype, DType::kBF16);
  EXPECT_EQ(pair.to.space, Space::kDestination);
  EXPECT_EQ(pair.to.buffer, dst.FindBuffer(2, "A"));
  EXPECT_EQ(pair.to.offset, 0);
  EXPECT_EQ(pair.to.dtype, DType::kFP32);
  EXPECT_EQ(pair.to.NumElements(), 4);
  // It runs after everything that fills its slot: both receives (or the unpacks after them).
  for (int recv : recvs) {
    bool after = false;
    for (int dep : plan.Deps(*convert)) {
      after = after || dep == recv || (plan.Deps(plan.ops[dep]).size() == 1 && plan.Deps(plan.ops[dep])[0] == recv);
    }
    EXPECT_TRUE(after) << "the Convert does not wait for Recv " << recv;
  }
  RunAndCheck(plan, src, dst, 2);
}

TEST(ElementTransformPlanTest, ALocalSourceIsCopiedIntoTheSlotThenConverted) {
  const Layout src = MegatronTp2(), dst = VllmTp1(0);
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok()) << ValidatePlan(r->plan, src, dst).ToString();
  RunAndCheck(r->plan, src, dst, 0);
}

TEST(ElementTransformPlanTest, TheGatherBroadcastBaselineAppliesItToo) {
  const Layout src = MegatronTp2(), dst = VllmTp1(2);
  Result<PlanResult> r = PlanGatherBroadcast(src, dst, Topology::Uniform(3, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok()) << ValidatePlan(r->plan, src, dst).ToString();
  RunAndCheck(r->plan, src, dst, 2);
}

TEST(ElementTransformPlanTest, Fp16AndFp32SourcesAreRead) {
  for (DType dtype : {DType::kFP16, DType::kFP32}) {
    Layout src = MegatronTp2(dtype), dst = VllmTp1(2);
    dst.tensors[0].dtype = dtype;
    Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(3, 1));
    ASSERT_TRUE(r.ok()) << DTypeName(dtype) << ": " << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok()) << ValidatePlan(r->plan, src, dst).ToString();
    HostRun run(r->plan);
    for (const Fragment f : src.fragments) {  // heads 1.0 in that dtype: A = -e
      for (int64_t h = 0; h < 2; ++h) StoreFromFloat(dtype, run.source[static_cast<size_t>(f.loc.buffer)].data() + h * DTypeSize(dtype), 1.0f);
    }
    run.Run(r->plan);
    for (int head = 0; head < 4; ++head) {
      uint32_t bits;
      std::memcpy(&bits, run.destination[static_cast<size_t>(dst.FindBuffer(2, "A"))].data() + 4 * head, 4);
      EXPECT_EQ(bits, 0xc02df854u) << DTypeName(dtype) << " head " << head;
    }
  }
}

TEST(ElementTransformPlanTest, TransformsWithoutAFunctionStayRefusedByName) {
  auto refused = [](const Layout& src, const Layout& dst) {
    Status s = PlanReshard(src, dst, Topology::Uniform(3, 1)).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    return s.message();
  };
  std::string m = refused(MegatronTp2(), VllmTp1(2, "A = exp(A_log)"));
  EXPECT_NE(m.find("destination tensor '" + std::string(kName) + "' is stored as A = exp(A_log) (fp32)"),
            std::string::npos) << m;
  m = refused(MegatronTp2(DType::kFP64), [] {
    Layout l = VllmTp1(2);
    l.tensors[0].dtype = DType::kFP64;
    return l;
  }());
  EXPECT_NE(m.find("from the source's fp64: ferry applies it from bf16, fp16 or fp32 into fp32"), std::string::npos) << m;
  m = refused(MegatronTp2(), VllmTp1(2, "A = -exp(A_log)", DType::kBF16));
  EXPECT_NE(m.find("stored as A = -exp(A_log) in bf16"), std::string::npos) << m;
  // On the source side a transform is read back, which no op does.
  Layout src = VllmTp1(0), dst = MegatronTp2();
  m = refused(src, [] {
    Layout l;
    const int t = l.AddTensor({kName, {4}, DType::kBF16}).value();
    l.AppendFragment(t, Box::FromShape({4}), 2, "A_log");
    return l;
  }());
  EXPECT_NE(m.find("source tensor '" + std::string(kName) + "' is stored as A = -exp(A_log)"), std::string::npos) << m;
}

}  // namespace
}  // namespace ferry
