// Plans into block-scaled fp8 destinations (planner/block_quantize.h), worked by hand: one
// Quantize op per destination matrix on its rank, reading a staging slot of the source's dtype and
// writing the fp8 matrix and its scales at the places the layout gives; blocks spanning two source
// ranks, a stacked fragment split per matrix; the plan validates, and running it on host memory
// gives the CPU reference (core/base/fp8_block.h) of the source's values; chunks of such a matrix
// hold whole block rows. Layouts the planner cannot quantize are rejected with what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/fp8_block.h"
#include "core/plan/export.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/host_run_testutil.h"

namespace ferry {
namespace {

using ::ferry::testing::HostRun;

const char* kName = "layers.0.x_proj.weight";

// Source: [200, 260] bf16 split by columns, 130 on rank 0 and 130 on rank 1, so the second
// 128-column block takes 2 columns from rank 0 and 126 from rank 1.
Layout Source() {
  Layout l;
  const int t = l.AddTensor({kName, {200, 260}, DType::kBF16}).value();
  l.AppendFragment(t, Box::Make({0, 0}, {200, 130}).value(), 0, "x");
  l.AppendFragment(t, Box::Make({0, 130}, {200, 260}).value(), 1, "x");
  return l;
}

// Destination: the whole [200, 260] on rank 2 as one fp8 matrix (2 x 3 blocks, the last row and
// column of blocks partial), scales in "x_scale_inv".
Layout Destination() {
  Layout l;
  const int t = l.AddTensor({kName, {200, 260}, DType::kFP8E4M3}).value();
  l.AppendFragment(t, Box::Make({0, 0}, {200, 260}).value(), 2, "x");
  const int scales = l.GetOrAddBuffer(2, "x_scale_inv");
  l.buffers.SetBytes(static_cast<size_t>(scales), 2 * 3 * 4);
  l.transforms.push_back({t, "fp8 e4m3 in 128x128 blocks", DType::kFP8E4M3});
  l.block_scaled.push_back({l.FindBuffer(2, "x"), scales, 1, 200, 260});
  return l;
}

// Runs `plan` on host memory with Source()'s two column halves cut from `whole` (the [200, 260]
// bf16 tensor, row-major) and expects Destination()'s fp8 matrix and scales to be the CPU
// reference of `whole` in format `fmt`.
void RunOnWholeTensor(const TransferPlan& plan, const Layout& src, const Layout& dst,
                      const std::vector<uint8_t>& whole, Fp8ScaleFormat fmt) {
  HostRun run(plan);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t row = 0; row < 200; ++row) {
      std::memcpy(run.source[static_cast<size_t>(src.FindBuffer(rank, "x"))].data() + row * 130 * 2,
                  whole.data() + (row * 260 + rank * 130) * 2, 130 * 2);
    }
  }
  run.Run(plan);
  std::vector<uint8_t> want(200 * 260);
  std::vector<float> want_scales(6);
  Fp8BlockQuantizeMatrices(DType::kBF16, whole.data(), 1, 200, 260, want.data(), want_scales.data(),
                           fmt);
  EXPECT_EQ(run.destination[static_cast<size_t>(dst.FindBuffer(2, "x"))], want);
  EXPECT_EQ(std::memcmp(run.destination[static_cast<size_t>(dst.FindBuffer(2, "x_scale_inv"))].data(),
                        want_scales.data(), 24),
            0);
}

// A [1000, 512] bf16 weight (1 KiB rows) sent whole from rank 0 to rank 1 of one node in chunks of
// at most 300 KiB: into fp8 blocks the chunks hold 256 rows (a multiple of 128, so that every
// message holds whole blocks), 256, 256 and 232; into bf16 they hold 300, 300, 300 and 100.
TEST(BlockQuantizePlanTest, ChunksIntoBlockScaledMatricesHoldWholeBlockRows) {
  auto layouts = [](bool quantized) {
    Layout src, dst;
    const int s = src.AddTensor({kName, {1000, 512}, DType::kBF16}).value();
    src.AppendFragment(s, Box::Make({0, 0}, {1000, 512}).value(), 0, "x");
    const int t = dst.AddTensor({kName, {1000, 512}, quantized ? DType::kFP8E4M3 : DType::kBF16}).value();
    dst.AppendFragment(t, Box::Make({0, 0}, {1000, 512}).value(), 1, "x");
    if (quantized) {
      const int scales = dst.GetOrAddBuffer(1, "x_scale_inv");
      dst.buffers.SetBytes(static_cast<size_t>(scales), 8 * 4 * 4);
      dst.transforms.push_back({t, "fp8 e4m3 in 128x128 blocks", DType::kFP8E4M3});
      dst.block_scaled.push_back({dst.FindBuffer(1, "x"), scales, 1, 1000, 512});
    }
    return std::pair{src, dst};
  };
  PlannerOptions options;
  options.same_node_chunk_bytes = 300 << 10;
  for (bool quantized : {true, false}) {
    const auto [src, dst] = layouts(quantized);
    Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(2, 8), options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<int64_t> received;
    for (const Op& op : r->plan.ops) {
      if (op.kind == OpKind::kRecv) received.push_back(op.bytes);
    }
    std::sort(received.begin(), received.end());
    const std::vector<int64_t> want = quantized ? std::vector<int64_t>{232 << 10, 256 << 10, 256 << 10, 256 << 10}
                                                : std::vector<int64_t>{100 << 10, 300 << 10, 300 << 10, 300 << 10};
    EXPECT_EQ(received, want) << (quantized ? "into fp8 blocks" : "into bf16");
  }
}

TEST(BlockQuantizePlanTest, OneQuantizeOpPerMatrixFromAStagingSlotOfTheSourceDtype) {
  const Layout src = Source(), dst = Destination();
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(3, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TransferPlan& plan = r->plan;
  ASSERT_TRUE(ValidatePlan(plan, src, dst).ok()) << ValidatePlan(plan, src, dst).ToString();
  EXPECT_EQ(plan.destination_buffers.size(), dst.buffers.size());
  std::vector<const Op*> quantizes;
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kQuantize) quantizes.push_back(&op);
  }
  ASSERT_EQ(quantizes.size(), 1u);
  const Op& q = *quantizes[0];
  EXPECT_EQ(q.rank, 2);
  EXPECT_EQ(q.data.space, Space::kDestination);
  EXPECT_EQ(q.data.buffer, dst.FindBuffer(2, "x_scale_inv"));
  EXPECT_EQ(q.data.offset, 0);
  const CopyPair c = plan.Copy(q.copies_begin);
  EXPECT_EQ(c.from.space, Space::kStaging);
  EXPECT_EQ(c.from.dtype, DType::kBF16);
  EXPECT_EQ(plan.slots[static_cast<size_t>(c.from.buffer)].bytes, 200 * 260 * 2);
  EXPECT_EQ(plan.slots[static_cast<size_t>(c.from.buffer)].rank, 2);
  EXPECT_EQ(c.to.space, Space::kDestination);
  EXPECT_EQ(c.to.buffer, dst.FindBuffer(2, "x"));
  EXPECT_EQ(c.to.dtype, DType::kFP8E4M3);
  EXPECT_EQ(q.NumDeps(), 2);  // the two deliveries into the slot, one from each source rank
  // The gather-and-broadcast baseline does not quantize.
  EXPECT_FALSE(PlanGatherBroadcast(src, dst, Topology::Uniform(3, 8)).ok());
}

TEST(BlockQuantizePlanTest, RunningThePlanGivesTheReference) {
  const Layout src = Source(), dst = Destination();
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(3, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The whole tensor row-major, bf16 of random magnitudes per block.
  std::mt19937 rng(23);
  std::vector<uint8_t> whole(200 * 260 * 2);
  for (int64_t i = 0; i < 200 * 260; ++i) {
    const float v = std::ldexp(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f, static_cast<int>((i / 260) / 128 * 7 - (i % 260) / 128 * 3));
    StoreFromFloat(DType::kBF16, whole.data() + i * 2, v);
  }
  RunOnWholeTensor(r->plan, src, dst, whole, Fp8ScaleFormat::kFloat32);
}

// A destination buffer with UE8M0 scales (BlockScaledBuffer::scale_fmt): its Quantize op carries
// the format, the plan's JSON names it, and running the plan gives the UE8M0 reference.
TEST(BlockQuantizePlanTest, Ue8m0ScaleFormatReachesTheQuantizeOp) {
  const Layout src = Source();
  Layout dst = Destination();
  dst.block_scaled[0].scale_fmt = Fp8ScaleFormat::kUe8m0;
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(3, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
  int quantizes = 0;
  for (const Op& op : r->plan.ops) {
    if (op.kind != OpKind::kQuantize) continue;
    ++quantizes;
    EXPECT_EQ(op.scale_fmt, Fp8ScaleFormat::kUe8m0);
  }
  EXPECT_EQ(quantizes, 1);
  EXPECT_NE(PlanToJson(r->plan).find("\"scale_fmt\":\"ue8m0\""), std::string::npos);
  EXPECT_EQ(PlanToJson(PlanReshard(src, Destination(), Topology::Uniform(3, 8))->plan).find("scale_fmt"),
            std::string::npos);
  std::vector<uint8_t> whole(200 * 260 * 2);
  for (int64_t i = 0; i < 200 * 260; ++i) {
    StoreFromFloat(DType::kBF16, whole.data() + i * 2, static_cast<float>(i % 1999) / 997.0f - 1.0f);
  }
  RunOnWholeTensor(r->plan, src, dst, whole, Fp8ScaleFormat::kUe8m0);
}

TEST(BlockQuantizePlanTest, AStackedFragmentIsQuantizedMatrixByMatrix) {
  Layout src, dst;
  const int s = src.AddTensor({"layers.0.experts.weight", {3, 130, 129}, DType::kFP32}).value();
  src.AppendFragment(s, Box::Make({0, 0, 0}, {3, 130, 129}).value(), 0, "e");
  const int t = dst.AddTensor({"layers.0.experts.weight", {3, 130, 129}, DType::kFP8E4M3}).value();
  dst.AppendFragment(t, Box::Make({0, 0, 0}, {3, 130, 129}).value(), 1, "w");
  const int scales = dst.GetOrAddBuffer(1, "w_scale_inv");
  dst.buffers.SetBytes(static_cast<size_t>(scales), 3 * 2 * 2 * 4);
  dst.transforms.push_back({t, "fp8 e4m3 in 128x128 blocks", DType::kFP8E4M3});
  dst.block_scaled.push_back({dst.FindBuffer(1, "w"), scales, 3, 130, 129});
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(2, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok()) << ValidatePlan(r->plan, src, dst).ToString();
  std::vector<std::pair<int64_t, int64_t>> places;  // (values offset, scales offset)
  for (const Op& op : r->plan.ops) {
    if (op.kind != OpKind::kQuantize) continue;
    const CopyPair c = r->plan.Copy(op.copies_begin);
    EXPECT_EQ(c.from.dtype, DType::kFP32);
    places.push_back({c.to.offset, op.data.offset});
  }
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {130 * 129, 16}, {2 * 130 * 129, 32}};
  EXPECT_EQ(places, want);
}

// The same stack with DeepGEMM's SM100 packed scales (core/base/fp8_packed_scales.h): each
// [130, 129] matrix has 2 block columns, one int32 word a row, rows aligned to 132: 528 bytes, so
// the Quantize ops write their scales at 0, 528 and 1056 of the 1584-byte buffer.
TEST(BlockQuantizePlanTest, PackedScalesAreWrittenAtEachMatrixsPackedOffset) {
  Layout src, dst;
  const int s = src.AddTensor({"layers.0.experts.weight", {3, 130, 129}, DType::kFP32}).value();
  src.AppendFragment(s, Box::Make({0, 0, 0}, {3, 130, 129}).value(), 0, "e");
  const int t = dst.AddTensor({"layers.0.experts.weight", {3, 130, 129}, DType::kFP8E4M3}).value();
  dst.AppendFragment(t, Box::Make({0, 0, 0}, {3, 130, 129}).value(), 1, "w");
  const int scales = dst.GetOrAddBuffer(1, "w_scale_inv");
  dst.buffers.SetBytes(static_cast<size_t>(scales), 3 * 528);
  dst.transforms.push_back({t, "fp8 e4m3 in 128x128 blocks", DType::kFP8E4M3});
  dst.block_scaled.push_back({dst.FindBuffer(1, "w"), scales, 3, 130, 129, Fp8ScaleFormat::kUe8m0Packed});
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(2, 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok()) << ValidatePlan(r->plan, src, dst).ToString();
  std::vector<int64_t> offsets;
  for (const Op& op : r->plan.ops) {
    if (op.kind != OpKind::kQuantize) continue;
    EXPECT_EQ(op.scale_fmt, Fp8ScaleFormat::kUe8m0Packed);
    EXPECT_EQ(QuantizeScales(op, r->plan.Copy(op.copies_begin).from).bytes, 528);
    offsets.push_back(op.data.offset);
  }
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 528, 1056}));
  EXPECT_NE(PlanToJson(r->plan).find("\"scale_fmt\":\"ue8m0_packed\""), std::string::npos);
}

TEST(BlockQuantizePlanTest, UncoveredMatrixOrIntegerSourceIsRejected) {
  Layout dst = Destination();
  Layout partial;
  const int t = partial.AddTensor({kName, {200, 260}, DType::kFP8E4M3}).value();
  partial.AppendFragment(t, Box::Make({0, 0}, {100, 260}).value(), 2, "x");
  partial.buffers.SetBytes(0, 200 * 260);
  const int scales = partial.GetOrAddBuffer(2, "x_scale_inv");
  partial.buffers.SetBytes(static_cast<size_t>(scales), 24);
  partial.transforms.push_back({t, "fp8", DType::kFP8E4M3});
  partial.block_scaled.push_back({0, scales, 1, 200, 260});
  partial.AddPadding(t, Box::Make({100, 0}, {200, 260}).value());
  Result<PlanResult> r = PlanReshard(Source(), partial, Topology::Uniform(3, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cover 26000 of the 52000 elements"), std::string::npos)
      << r.status().ToString();
  Layout int_source;
  const int s = int_source.AddTensor({kName, {200, 260}, DType::kInt8}).value();
  int_source.AppendFragment(s, Box::Make({0, 0}, {200, 260}).value(), 0, "x");
  r = PlanReshard(int_source, dst, Topology::Uniform(3, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("as int8"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace ferry
