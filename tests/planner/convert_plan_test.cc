// Plans with dtype conversions (planner/conversion.h), worked by hand: which ops convert, where,
// in which dtype the bytes travel, and that running the plan on host memory gives every
// destination element the CPU reference conversion of its source element. Unsupported pairs are
// rejected naming the tensor and both dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/float_convert.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/host_run_testutil.h"

namespace ferry {
namespace {

using ::ferry::testing::HostRun;

// A [rows, cols] tensor `name` of `dtype`: whole on `rank`, or split by columns over `ranks`.
void Place(Layout& layout, DType dtype, const std::vector<int>& ranks, int64_t rows, int64_t cols) {
  const int t = layout.AddTensor({"w", {rows, cols}, dtype}).value();
  const int64_t part = cols / static_cast<int64_t>(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int64_t lo = part * static_cast<int64_t>(i);
    layout.AppendFragment(t, *Box::Make({0, lo}, {rows, lo + part}), ranks[i], "buf");
  }
}

// Plans `src` -> `dst`, runs it, and checks each destination element against ConvertElement of
// the source element (both layouts hold tensor "w", whole or split by columns).
void PlanRunCheck(const Layout& src, const Layout& dst, int ranks, std::vector<OpKind>* kinds,
                  std::vector<int64_t>* send_bytes) {
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(ranks, ranks));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TransferPlan& plan = r->plan;
  Status valid = ValidatePlan(plan, src, dst);
  ASSERT_TRUE(valid.ok()) << valid.ToString();
  for (const Op& op : plan.ops) {
    kinds->push_back(op.kind);
    if (op.kind == OpKind::kSend) send_bytes->push_back(op.bytes);
  }
  HostRun run(plan);
  std::mt19937 rng(7);
  for (auto& b : run.source) {
    for (auto& byte : b) byte = static_cast<uint8_t>(rng());
  }
  run.Run(plan);
  const DType sd = src.tensors[0].dtype, dd = dst.tensors[0].dtype;
  for (const Fragment df : dst.fragments) {
    for (const Fragment sf : src.fragments) {
      for (int64_t i = df.box.lo[0]; i < df.box.hi[0]; ++i) {
        for (int64_t j = std::max(df.box.lo[1], sf.box.lo[1]); j < std::min(df.box.hi[1], sf.box.hi[1]); ++j) {
          const Location& sl = sf.loc;
          const Location& dl = df.loc;
          const uint8_t* s = run.source[sl.buffer].data() + sl.byte_offset +
                             ((i - sf.box.lo[0]) * sl.strides[0] + (j - sf.box.lo[1]) * sl.strides[1]) * DTypeSize(sd);
          const uint8_t* d = run.destination[dl.buffer].data() + dl.byte_offset +
                             ((i - df.box.lo[0]) * dl.strides[0] + (j - df.box.lo[1]) * dl.strides[1]) * DTypeSize(dd);
          uint8_t want[4];
          ConvertElement(sd, dd, s, want);
          ASSERT_EQ(std::memcmp(d, want, DTypeSize(dd)), 0) << "element " << i << "," << j;
        }
      }
    }
  }
}

TEST(ConvertPlanTest, SameRankCopyBecomesOneConvert) {
  Layout src, dst;
  Place(src, DType::kBF16, {0}, 4, 6);
  Place(dst, DType::kFP32, {0}, 4, 6);
  std::vector<OpKind> kinds;
  std::vector<int64_t> sends;
  PlanRunCheck(src, dst, 1, &kinds, &sends);
  EXPECT_EQ(kinds, std::vector<OpKind>{OpKind::kConvert});
}

// fp32 columns split over ranks 0 and 1 -> fp8 e4m3 whole on rank 2: each sender packs and
// converts its half into fp8 staging (4 x 4 elements = 16 bytes on the wire, not 64); rank 2 then
// unpacks the fp8 bytes into its strided destination as a plain Unpack.
TEST(ConvertPlanTest, NarrowingConvertsOnTheSender) {
  Layout src, dst;
  Place(src, DType::kFP32, {0, 1}, 4, 8);
  Place(dst, DType::kFP8E4M3, {2}, 4, 8);
  std::vector<OpKind> kinds;
  std::vector<int64_t> sends;
  PlanRunCheck(src, dst, 3, &kinds, &sends);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), OpKind::kConvert), 2);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), OpKind::kUnpack), 2);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), OpKind::kPack), 0);
  EXPECT_EQ(sends, (std::vector<int64_t>{16, 16}));
}

// bf16 whole on rank 0 -> fp32 split by columns over ranks 1 and 2: the sender packs bf16 (4 x 3
// elements = 24 bytes per message), each receiver converts while unpacking.
TEST(ConvertPlanTest, WideningConvertsOnTheReceiver) {
  Layout src, dst;
  Place(src, DType::kBF16, {0}, 4, 6);
  Place(dst, DType::kFP32, {1, 2}, 4, 6);
  std::vector<OpKind> kinds;
  std::vector<int64_t> sends;
  PlanRunCheck(src, dst, 3, &kinds, &sends);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), OpKind::kPack), 2);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), OpKind::kConvert), 2);
  EXPECT_EQ(sends, (std::vector<int64_t>{24, 24}));
}

// A contiguous fp32 source sent to an fp8 destination cannot be sent as it lies: it is packed
// and converted even though a plain copy would need no Pack.
TEST(ConvertPlanTest, ContiguousSourceStillPacksWhenNarrowing) {
  Layout src, dst;
  Place(src, DType::kFP32, {0}, 4, 8);
  Place(dst, DType::kFP8E5M2, {1}, 4, 8);
  std::vector<OpKind> kinds;
  std::vector<int64_t> sends;
  PlanRunCheck(src, dst, 2, &kinds, &sends);
  EXPECT_EQ(kinds, (std::vector<OpKind>{OpKind::kConvert, OpKind::kSend, OpKind::kRecv}));
  EXPECT_EQ(sends, std::vector<int64_t>{32});
}

TEST(ConvertPlanTest, UnsupportedPairsAreRejectedNamingTensorAndDtypes) {
  for (auto [from, to] : {std::pair{DType::kBF16, DType::kInt8}, std::pair{DType::kFP8E4M3, DType::kBF16},
                          std::pair{DType::kInt32, DType::kFP32}}) {
    Layout src, dst;
    Place(src, from, {0}, 2, 2);
    Place(dst, to, {1}, 2, 2);
    Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(2, 2));
    ASSERT_FALSE(r.ok());
    const std::string msg = r.status().ToString();
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(DTypeName(from))), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(DTypeName(to))), std::string::npos) << msg;
  }
}

TEST(ConvertPlanTest, GatherBroadcastBaselineRefusesConversions) {
  Layout src, dst;
  Place(src, DType::kBF16, {0}, 2, 2);
  Place(dst, DType::kFP8E4M3, {1}, 2, 2);
  Result<PlanResult> r = PlanGatherBroadcast(src, dst, Topology::Uniform(2, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("does not convert"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace ferry
