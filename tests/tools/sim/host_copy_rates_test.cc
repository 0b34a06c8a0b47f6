// Tests for copy rates by row pattern and conversion rates on host-memory ranks
// (tools/sim/row_rates.h, tools/sim/convert_rates.h, tools/sim/host_copy_rates.h): the tables'
// interpolation, lookup and validation, the row the executor's copy loop loads, and simulated
// times of copies and direct reads of short strided rows, of conversions and of Quantize ops (on
// host_mem, or sharing the node's host_cores), against contiguous copies of the same bytes, worked
// out by hand.
#include <gtest/gtest.h>

#include "core/runtime/strided_copy.h"
#include "tests/core/plan/plan_fixture.h"
#include "tools/sim/convert_rates.h"
#include "tools/sim/host_copy_rates.h"
#include "tools/sim/row_rates.h"
#include "tools/sim/simulator.h"

namespace ferry::sim {
namespace {

// 64-byte rows copy at 2 GB/s every 128 bytes and 1 GB/s every 1 KiB, 1 KiB rows at 4 GB/s every
// 2 KiB; 64 KiB rows back to back (one long row) at 8 GB/s, the contiguous rate.
std::vector<RowRate> Table() {
  return {{64, 128, 2e9}, {64, 1024, 1e9}, {1024, 2048, 4e9}, {65536, 65536, 8e9}};
}

TEST(RowRatesTest, InterpolatesInLogRowAndPitchAndClampsBeyondTheEnds) {
  const std::vector<RowRate> t = Table();
  EXPECT_DOUBLE_EQ(ContiguousRate(t), 8e9);
  EXPECT_DOUBLE_EQ(RowRateAt(t, 64, 128), 2e9);
  EXPECT_DOUBLE_EQ(RowRateAt(t, 64, 1024), 1e9);
  EXPECT_DOUBLE_EQ(RowRateAt(t, 64, 8192), 1e9);  // wider than measured: the widest point
  EXPECT_DOUBLE_EQ(RowRateAt(t, 16, 32), 2e9);    // shorter than measured: the shortest row
  // Pitch 512 = 64 x 8 lies at 2/3 of log(2)..log(16): 2 - (2/3) x 1 GB/s.
  EXPECT_NEAR(RowRateAt(t, 64, 512), 2e9 - 2e9 / 3, 1e3);
  // Row 256 lies halfway (in log) between 64 and 1024; at pitch 2 x row: (2 + 4) / 2 GB/s.
  EXPECT_NEAR(RowRateAt(t, 256, 512), 3e9, 1e3);
  // Rows back to back load one sequential stream: the contiguous rate; halfway (in log) between
  // back to back and the smallest measured pitch, halfway between the rates.
  EXPECT_DOUBLE_EQ(RowRateAt(t, 1024, 1024), 8e9);
  EXPECT_NEAR(RowRateAt(t, 1024, 1448), 6e9, 0.01e9);
  EXPECT_DOUBLE_EQ(RowRateAt(t, 1 << 30, 1 << 30), 8e9);
}

TEST(RowRatesTest, ValidationNamesTheBadPoint) {
  EXPECT_TRUE(ValidateRowRates(Table()).ok());
  EXPECT_TRUE(ValidateRowRates({}).ok());
  auto message = [](std::vector<RowRate> t) { return ValidateRowRates(t).message(); };
  EXPECT_NE(message({{64, 32, 1e9}}).find("point 1 (row 64 B every 32 B)"), std::string::npos);
  EXPECT_NE(message({{0, 32, 1e9}}).find(">= 1 byte"), std::string::npos);
  EXPECT_NE(message({{64, 128, 0}}).find("rate"), std::string::npos);
  EXPECT_NE(message({{64, 128, 1e16}}).find("1 PB/s"), std::string::npos);
  EXPECT_NE(message({{64, 128, 1e9}, {64, 128, 2e9}}).find("point 2"), std::string::npos);
  EXPECT_NE(message({{128, 128, 1e9}, {64, 128, 2e9}}).find("ordered"), std::string::npos);
  EXPECT_FALSE(ValidateRowRates(std::vector<RowRate>(kMaxRowRates + 1, {64, 128, 1e9})).ok());
}

// [rows, 16] fp32 (64-byte rows) at byte 0 of buffer 0 of `space`, rows `pitch` elements apart.
Region Rows(Space space, int64_t rows, int64_t pitch) {
  return Fp32Matrix(space, 0, 0, rows, 16, pitch);
}

TEST(RowPatternTest, IsTheRunTheCopyLoopLoadsAndItsSourcePitch) {
  const int64_t rows = 1000;
  RowPattern strided = RowPatternOf(*MakeCopyGeometry(Rows(Space::kSource, rows, 32),
                                                      Rows(Space::kDestination, rows, 16)));
  EXPECT_EQ(strided.row_bytes, 64);
  EXPECT_EQ(strided.pitch_bytes, 128);
  // Dense on both sides: one row of every byte.
  RowPattern dense = RowPatternOf(*MakeCopyGeometry(Rows(Space::kSource, rows, 16),
                                                    Rows(Space::kDestination, rows, 16)));
  EXPECT_EQ(dense.row_bytes, rows * 64);
  EXPECT_EQ(dense.pitch_bytes, rows * 64);
  // Strided on the destination only: the loads are back to back.
  RowPattern scattered = RowPatternOf(*MakeCopyGeometry(Rows(Space::kSource, rows, 16),
                                                       Rows(Space::kDestination, rows, 32)));
  EXPECT_EQ(scattered.row_bytes, 64);
  EXPECT_EQ(scattered.pitch_bytes, 64);
}

constexpr int64_t kRows = 1'000'000;       // 64 MB of 64-byte rows
constexpr int64_t kBytes = kRows * 64;

// One node of 2 host-memory ranks, 1 GB/s a stream, `node_rate` for the node, `table` or none.
ClusterSpec HostNode(double node_rate, std::vector<RowRate> table) {
  ClusterSpec c;
  c.name = "host";
  c.gpus_per_node = 2;
  c.nics_per_node = 1;
  c.host_memory_ranks = true;
  c.host_copy_bandwidth = 1e9;
  c.host_memory_bandwidth = node_rate;
  c.kernel_overhead = 0;
  c.nvlink_message_overhead = 0;
  c.nvlink_latency = 0;
  c.host_copy_row_rates = std::move(table);
  return c;
}

// A Copy on each of `ranks` ranks of 64-byte rows taken every `pitch` fp32 elements.
TransferPlan Copies(int ranks, int64_t pitch) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "s0", kRows * pitch * 4}, {1, "s1", kRows * pitch * 4}};
  plan.destination_buffers = {{0, "d0", kBytes}, {1, "d1", kBytes}};
  for (int rank = 0; rank < ranks; ++rank) {
    Op copy;
    copy.kind = OpKind::kCopy;
    copy.rank = rank;
    copy.bytes = kBytes;
    Region from = Rows(Space::kSource, kRows, pitch), to = Rows(Space::kDestination, kRows, 16);
    from.buffer = to.buffer = rank;
    plan.AddOp(copy, {}, {{from, to}});
  }
  return plan;
}

double SimulatedTime(const TransferPlan& plan, const ClusterSpec& cluster, bool direct_reads = false) {
  SimOptions options;
  options.direct_reads = direct_reads;
  Result<SimResult> r = Simulate(plan, cluster, RankMapping::Identity(plan.num_ranks), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->total_time : -1;
}

// Rows of 64 B every 128 B copy at 2 GB/s against the table's contiguous 8 GB/s: 4 times as long
// as the same bytes contiguous, 64 MB at 1 GB/s / 4.
TEST(HostCopyRatesTest, ShortStridedRowsTakeTheTablesRatioLonger) {
  const ClusterSpec c = HostNode(100e9, Table());
  EXPECT_NEAR(SimulatedTime(Copies(1, 16), c), 0.064, 1e-9);
  EXPECT_NEAR(SimulatedTime(Copies(1, 32), c), 4 * 0.064, 1e-9);
  // Every 1 KiB (256 fp32): 1 GB/s, 8 times as long.
  EXPECT_NEAR(SimulatedTime(Copies(1, 256), c), 8 * 0.064, 1e-9);
}

// Short rows also hold the node longer: two strided copies sharing a 1 GB/s node take 4 x 2 x
// 0.064 s, where a cap on each stream alone (0.25 GB/s, 0.5 GB/s together) would leave the
// node half idle and take 0.256 s.
TEST(HostCopyRatesTest, ShortRowsTakeTheirShareOfTheNodeLonger) {
  const ClusterSpec c = HostNode(1e9, Table());
  EXPECT_NEAR(SimulatedTime(Copies(2, 16), c), 2 * 0.064, 1e-9);
  EXPECT_NEAR(SimulatedTime(Copies(2, 32), c), 4 * 2 * 0.064, 1e-9);
}

TEST(HostCopyRatesTest, WithoutATableEveryRowCopiesAtTheStreamRate) {
  const ClusterSpec c = HostNode(100e9, {});
  EXPECT_EQ(SimulatedTime(Copies(1, 32), c), SimulatedTime(Copies(1, 16), c));
  EXPECT_NEAR(SimulatedTime(Copies(1, 32), c), 0.064, 1e-9);
  EXPECT_TRUE(HostCopySlowdowns(Copies(1, 32), c, {}).empty());
  ClusterSpec gpus = HostNode(100e9, Table());
  gpus.host_memory_ranks = false;
  EXPECT_TRUE(HostCopySlowdowns(Copies(1, 32), gpus, {}).empty());
}

// Rank 0 packs 64-byte rows taken every `pitch` fp32 into a slot, sends it to rank 1 on the same
// node, which unpacks it into a dense destination: as a direct read, rank 1 copies the rows
// straight from rank 0's source.
TransferPlan PackedMessage(int64_t pitch) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "s", kRows * pitch * 4}};
  plan.destination_buffers = {{1, "d", kBytes}};
  const int out = plan.AddSlot(0, kBytes), in = plan.AddSlot(1, kBytes);
  Op pack;
  pack.kind = OpKind::kPack;
  pack.bytes = kBytes;
  Region packed = Rows(Space::kStaging, kRows, 16);
  packed.buffer = out;
  const int p = plan.AddOp(pack, {}, {{Rows(Space::kSource, kRows, pitch), packed}});
  Op send;
  send.kind = OpKind::kSend;
  send.peer = 1;
  send.message = 0;
  send.bytes = kBytes;
  send.link = LinkClass::kSameNode;
  send.SetData(ByteRange(Space::kStaging, out, 0, kBytes));
  plan.AddOp(send, {p});
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 1;
  recv.peer = 0;
  recv.SetData(ByteRange(Space::kStaging, in, 0, kBytes));
  const int r = plan.AddOp(recv, {});
  Op unpack;
  unpack.kind = OpKind::kUnpack;
  unpack.rank = 1;
  unpack.bytes = kBytes;
  Region received = Rows(Space::kStaging, kRows, 16);
  received.buffer = in;
  plan.AddOp(unpack, {r}, {{received, Rows(Space::kDestination, kRows, 16)}});
  return plan;
}

TEST(HostCopyRatesTest, ADirectReadOfShortStridedRowsTakesTheTablesRatioLonger) {
  const ClusterSpec c = HostNode(100e9, Table());
  ASSERT_EQ(FindDirectReads(PackedMessage(32), kAnyRank).size(), 1u);
  EXPECT_NEAR(SimulatedTime(PackedMessage(16), c, true), 0.064, 1e-9);
  EXPECT_NEAR(SimulatedTime(PackedMessage(32), c, true), 4 * 0.064, 1e-9);
  // Staged: the Pack loads the strided rows (4 x 0.064 s), the message and the Unpack copy
  // contiguous bytes (0.064 s each).
  EXPECT_NEAR(SimulatedTime(PackedMessage(32), c, false), 6 * 0.064, 1e-9);
}

// One op on each of `ranks` ranks turning a dense [kRows, 16] bf16 matrix of its own into fp8
// e4m3, kBytes / 2 bytes read and kBytes / 4 written: a Copy that converts, or a Quantize (its
// scales in a second destination buffer, left out of its bytes here).
TransferPlan Bf16ToE4m3(OpKind kind, int ranks = 1) {
  TransferPlan plan;
  plan.num_ranks = 2;
  for (int rank = 0; rank < ranks; ++rank) {
    plan.source_buffers.push_back({rank, "s" + std::to_string(rank), kBytes / 2});
    plan.destination_buffers.push_back({rank, "d" + std::to_string(rank), kBytes / 4});
    plan.destination_buffers.push_back({rank, "scales" + std::to_string(rank), 4096});
  }
  for (int rank = 0; rank < ranks; ++rank) {
    Op op;
    op.kind = kind;
    op.rank = rank;
    if (kind == OpKind::kQuantize) op.SetData(ByteRange(Space::kDestination, 2 * rank + 1, 0, 4096));
    op.bytes = kBytes / 4;
    plan.AddOp(op, {}, {{Matrix(DType::kBF16, Space::kSource, rank, 0, kRows, 16, 16),
                         Matrix(DType::kFP8E4M3, Space::kDestination, 2 * rank, 0, kRows, 16, 16)}});
  }
  return plan;
}

// The table's contiguous rate is 8 GB/s; bf16 -> fp8 e4m3 reads 2 GB/s of bf16. The Copy's 32 MB
// of bf16 take 16 ms at that rate, where its 16 MB written would take 2 ms contiguous: 8 times as
// long, so on a 1 GB/s stream 8 x 16 ms. Unlisted pairs, or no conversion table, cost what a
// contiguous copy of the bytes written does: 16 ms.
TEST(HostCopyRatesTest, AConversionTakesItsSourceBytesAtTheListedRate) {
  ClusterSpec c = HostNode(100e9, Table());
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kCopy), c), 0.016, 1e-9);
  c.host_convert_rates = {{DType::kBF16, DType::kFP32, 1e9}};
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kCopy), c), 0.016, 1e-9);
  c.host_convert_rates.push_back({DType::kBF16, DType::kFP8E4M3, 2e9});
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kCopy), c), 8 * 0.016, 1e-9);
  EXPECT_DOUBLE_EQ(HostCopySlowdowns(Bf16ToE4m3(OpKind::kCopy), c, {})[0], 8.0);
}

// The quantizer reads 0.5 GB/s of values against the table's contiguous 8 GB/s: its 32 MB take
// 64 ms, where the 16 MB it writes would take 2 ms contiguous, 32 times as long; on a 1 GB/s
// stream 32 x 16 ms. Without host_quantize_rate it costs a copy of its bytes, 16 ms; the
// conversion table's bf16 -> e4m3 cast does not apply to it.
TEST(HostCopyRatesTest, AQuantizeTakesItsValuesAtTheQuantizersRate) {
  ClusterSpec c = HostNode(100e9, Table());
  c.host_convert_rates = {{DType::kBF16, DType::kFP8E4M3, 2e9}};
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 0.016, 1e-9);
  c.host_quantize_rate = 0.5e9;
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 32 * 0.016, 1e-9);
  EXPECT_DOUBLE_EQ(HostCopySlowdowns(Bf16ToE4m3(OpKind::kQuantize), c, {})[0], 32.0);
}

// With host_cores the quantizer runs on the node's cores at its measured 0.5 GB/s of values a
// core: one op's 32 MB of bf16 on 2 cores take 32 ms, two ops on two ranks share the 2 cores, 64
// ms; one core, 64 and 128 ms; 16 cores, one op on the executor's 8 threads, 8 ms. Without
// host_cores it is the 1 GB/s stream's 32 x 16 ms above, one op or two (a 100 GB/s host_mem).
TEST(HostCopyRatesTest, QuantizesShareTheNodesCoresAtTheQuantizersRateACore) {
  ClusterSpec c = HostNode(100e9, Table());
  c.host_quantize_rate = 0.5e9;
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 32 * 0.016, 1e-9);
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize, 2), c), 32 * 0.016, 1e-9);
  c.host_cores = 2;
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 0.032, 1e-9);
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize, 2), c), 0.064, 1e-9);
  c.host_cores = 1;
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 0.064, 1e-9);
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize, 2), c), 0.128, 1e-9);
  c.host_cores = 16;
  EXPECT_NEAR(SimulatedTime(Bf16ToE4m3(OpKind::kQuantize), c), 0.008, 1e-9);
  // Copies stay on host_mem: a contiguous 64 MB copy on the 1 GB/s stream, 64 ms.
  EXPECT_NEAR(SimulatedTime(Copies(1, 16), c), 0.064, 1e-9);
}

TEST(HostCopyRatesTest, HostCoresNeedTheQuantizersRateAndAreBounded) {
  ClusterSpec c = HostNode(100e9, Table());
  c.host_cores = 2;
  Status s = c.Validate();
  EXPECT_NE(s.message().find("'host_cores' needs 'host_quantize_rate'"), std::string::npos) << s.ToString();
  c.host_quantize_rate = 0.5e9;
  EXPECT_TRUE(c.Validate().ok());
  c.host_cores = -1;
  EXPECT_NE(c.Validate().message().find("'host_cores' must be in [0, 4096]"), std::string::npos);
  Result<ClusterSpec> parsed = ParseClusterYaml(
      "base: dgx-h100\nhost_memory_ranks: true\nhost_copy_row_rates:\n  - [64KiB, 64KiB, 8GB/s]\n"
      "host_quantize_rate: 0.5GB/s\nhost_cores: 2\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->host_cores, 2);
  EXPECT_FALSE(ParseClusterYaml("base: dgx-h100\nhost_cores: 2.5\n").ok());
}

TEST(ConvertRatesTest, LookupAndValidationNameTheBadEntry) {
  const std::vector<ConvertRate> table = {{DType::kBF16, DType::kFP8E4M3, 3e9}, {DType::kFP32, DType::kBF16, 5e9}};
  EXPECT_TRUE(ValidateConvertRates(table).ok());
  EXPECT_EQ(ConvertRateOf(table, DType::kFP32, DType::kBF16), 5e9);
  EXPECT_EQ(ConvertRateOf(table, DType::kBF16, DType::kFP32), 0);
  std::vector<ConvertRate> twice = table;
  twice.push_back({DType::kBF16, DType::kFP8E4M3, 1e9});
  Status s = ValidateConvertRates(twice);
  EXPECT_NE(s.message().find("entry 3 (bf16 -> fp8_e4m3): the same pair as entry 1"), std::string::npos)
      << s.ToString();
  s = ValidateConvertRates(std::vector<ConvertRate>{{DType::kBF16, DType::kBF16, 1e9}});
  EXPECT_NE(s.message().find("entry 1 (bf16 -> bf16): converts a dtype into itself"), std::string::npos)
      << s.ToString();
  s = ValidateConvertRates(std::vector<ConvertRate>{{DType::kBF16, DType::kFP32, 0}});
  EXPECT_NE(s.message().find("rate must be"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ferry::sim
