// Tests for the simulator: hand-computed times for one flow, shared links (max-min fairness, the
// order in which progressive filling fixes links, classes going idle and returning; host-memory
// ranks sharing their node's copy rate and message costs), a chain of dependent ops, fan-out,
// store-and-forward relays, rendezvous of Send/Recv, host staging, direct reads (converting ones
// moving what they read and write, narrowing ones packed on the sender between GPUs, quantizing
// ones leaving their Quantize op part of its rows),
// conversions into fp8 at their own rate, kernels of processes sharing a GPU taking turns, a
// rank's kernels running one after another on its stream, the
// rate slack (freed capacity left idle up to SimOptions::rate_slack, and the rate updates that
// saves), the critical path, the progress
// published at the end, and rejection of malformed plans.
#include "tools/sim/simulator.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>

#include "tests/core/plan/plan_fixture.h"

namespace ferry::sim {
namespace {

// 2 GPUs a node, 2 NICs a node (one per GPU), 1 GB/s NICs, 10 GB/s NVLink, 100 GB/s copy,
// 50 GB/s pack, no latencies or overheads unless a test sets them.
ClusterSpec TestCluster() {
  ClusterSpec c;
  c.name = "test";
  c.gpus_per_node = 2;
  c.nics_per_node = 2;
  c.nic_bandwidth = 1e9;
  c.nic_latency = 0;
  c.nic_message_overhead = 0;
  c.network_efficiency = 1;
  c.cross_rail_latency = 0;
  c.nvlink_bandwidth = 10e9;
  c.nvlink_latency = 0;
  c.nvlink_message_overhead = 0;
  c.nvlink_efficiency = 1;
  c.copy_bandwidth = 100e9;
  c.pack_bandwidth = 50e9;
  c.kernel_overhead = 0;
  return c;
}

class PlanBuilder {
 public:
  explicit PlanBuilder(int ranks) { plan_.num_ranks = ranks; }
  // Returns {send op, recv op}.
  std::pair<int, int> Message(int from, int to, int64_t bytes, std::vector<int> send_deps = {},
                              std::vector<int> recv_deps = {}, OpKind sender = OpKind::kSend) {
    Op s;
    s.kind = sender;
    s.rank = from;
    s.peer = to;
    s.message = next_message_;
    s.bytes = bytes;
    Op r;
    r.kind = OpKind::kRecv;
    r.rank = to;
    r.peer = from;
    r.message = next_message_++;
    r.bytes = bytes;
    int a = plan_.AddOp(s, send_deps);
    int b = plan_.AddOp(r, recv_deps);
    return {a, b};
  }
  int Local(OpKind kind, int rank, int64_t bytes, std::vector<int> deps = {}) {
    Op op;
    op.kind = kind;
    op.rank = rank;
    op.bytes = bytes;
    return plan_.AddOp(op, deps);
  }
  TransferPlan& plan() { return plan_; }

 private:
  TransferPlan plan_;
  int64_t next_message_ = 0;
};

SimResult SimulatePlan(const TransferPlan& plan, const ClusterSpec& cluster = TestCluster(),
              SimOptions options = {}, const RankMapping* mapping = nullptr) {
  options.record_op_times = true;
  Result<SimResult> r =
      Simulate(plan, cluster, mapping != nullptr ? *mapping : RankMapping::Identity(plan.num_ranks), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimResult{};
}

// SimulatePlan of a two-rank plan with both ranks on GPU 0.
SimResult SimulateOnOneGpu(const TransferPlan& plan, const ClusterSpec& cluster, const SimOptions& options = {}) {
  const RankMapping one_gpu{{0, 0}};
  return SimulatePlan(plan, cluster, options, &one_gpu);
}

TEST(SimulatorTest, OneNetworkFlowTakesBytesOverBandwidthPlusFixedCosts) {
  PlanBuilder b(4);
  b.Message(0, 2, 1'000'000'000);
  ClusterSpec c = TestCluster();
  c.nic_latency = 1e-3;
  c.nic_message_overhead = 2e-3;
  SimResult r = SimulatePlan(b.plan(), c);
  EXPECT_NEAR(r.total_time, 1.003, 1e-9);
  EXPECT_EQ(r.num_messages, 1);
  EXPECT_DOUBLE_EQ(r.network_bytes, 1e9);
  ASSERT_EQ(r.op_times.size(), 2u);
  // The message starts when posted; its fixed cost is link time before the bytes.
  EXPECT_NEAR(r.op_times[0].start, 0, 1e-12);
  // Rates are recomputed when it starts (its class: one update); its finish leaves no class on
  // its links, so nothing is recomputed then, unless every touched link is (rate_slack 0: a
  // second recomputation, of no class).
  EXPECT_EQ(r.num_recomputations, 1);
  EXPECT_EQ(r.num_class_updates, 1);
  SimOptions every_link;
  every_link.rate_slack = 0;
  SimResult all = SimulatePlan(b.plan(), c, every_link);
  EXPECT_EQ(all.num_recomputations, 2);
  EXPECT_EQ(all.num_class_updates, 1);
}

// 100 small messages from one NIC: each message's 10 us fixed cost occupies the NIC, so they take
// 100 x (10 us + 1 us) one after the other, not one overhead in all; ten times the overhead, about
// ten times the time. Copies on one GPU likewise serialise their launch costs.
// Ranks sharing one GPU (ClusterSpec::ranks_per_gpu): their messages are copies through that
// GPU's memory, and two of them share it: 1 GB each at 100 GB/s together take 20 ms, where two
// NVLink messages of different GPU pairs would take 100 ms each in parallel.
TEST(SimulatorTest, MessagesBetweenRanksOfOneGpuShareItsMemory) {
  PlanBuilder b(4);
  b.Message(0, 1, 1'000'000'000);
  b.Message(2, 3, 1'000'000'000);
  ClusterSpec c = TestCluster();
  c.ranks_per_gpu = 4;
  SimOptions options;
  options.record_op_times = true;
  Result<SimResult> r = Simulate(b.plan(), c, RankMapping{{0, 0, 0, 0}}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->total_time, 0.02, 1e-9);
  EXPECT_DOUBLE_EQ(r->network_bytes, 0);
}

// SimOptions::progress ends where the run ends: every op done, the clock at the predicted time.
// A chain of 9000 ops (more events than one publication interval): Copy 1 ms each on one GPU.
TEST(SimulatorTest, ProgressEndsWithEveryOpDoneAtThePredictedTime) {
  PlanBuilder b(1);
  int previous = -1;
  for (int i = 0; i < 9000; ++i) {
    previous = b.Local(OpKind::kCopy, 0, 100'000'000,
                       previous < 0 ? std::vector<int>{} : std::vector<int>{previous});
  }
  SimProgress progress;
  SimOptions options;
  options.progress = &progress;
  const SimResult r = SimulatePlan(b.plan(), TestCluster(), options);
  EXPECT_NEAR(r.total_time, 9.0, 1e-6);
  EXPECT_EQ(progress.ops_total.load(), 9000);
  EXPECT_EQ(progress.ops_done.load(), 9000);
  EXPECT_DOUBLE_EQ(progress.simulated_seconds.load(), r.total_time);
}

// Direct reads (SimOptions::direct_reads, core/runtime/direct_read.h): the receiver copies a
// same-node message straight from the sender's buffers, so the message's Pack and Unpack cost
// nothing. Pack 1 ms + message 2 ms + Unpack 1 ms staged; the message's 2 ms alone direct.
TEST(SimulatorTest, DirectReadsDropTheMessagesPackAndUnpack) {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode);
  ClusterSpec c = TestCluster();
  c.kernel_overhead = 1e-3;
  c.nvlink_message_overhead = 2e-3;
  SimOptions staged;
  staged.staging_budget = 0;
  EXPECT_NEAR(SimulatePlan(plan, c, staged).total_time, 4e-3, 1e-7);
  SimOptions direct = staged;
  direct.direct_reads = true;
  EXPECT_NEAR(SimulatePlan(plan, c, direct).total_time, 2e-3, 1e-7);
  // A network message is not read directly: it keeps its Pack and Unpack.
  EXPECT_NEAR(SimulatePlan(MakePackedPlan(LinkClass::kNetwork), c, direct).total_time,
              SimulatePlan(MakePackedPlan(LinkClass::kNetwork), c, staged).total_time, 1e-12);
}

// A direct read whose Pack narrows (an fp32 source, a bf16 message of 64 bytes) reads the
// source's 128 bytes and writes the message's 64: between GPUs of a node its reads cross NVLink,
// on one GPU it takes (128 + 64) / 2 copied bytes of the GPU's memory, and its kernel is capped
// at pack_bandwidth (in copied bytes) as a Convert op's.
TEST(SimulatorTest, ADirectReadThatConvertsMovesWhatItReadsAndWrites) {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  ClusterSpec c = TestCluster();
  c.pack_bandwidth = 1e12;
  SimOptions direct;
  direct.staging_budget = 0;
  direct.direct_reads = true;
  direct.convert_on_sender = ConvertOnSender::kNever;  // between GPUs `auto` packs on the sender
  const SimResult nvlink = SimulatePlan(plan, c, direct);
  EXPECT_NEAR(nvlink.total_time, 128 / 10e9, 1e-18);
  EXPECT_DOUBLE_EQ(nvlink.nvlink_bytes, 128);
  c.ranks_per_gpu = 2;
  SimResult one_gpu = SimulateOnOneGpu(plan, c, direct);
  EXPECT_NEAR(one_gpu.total_time, 96 / 100e9, 1e-18);
  c.pack_bandwidth = 10e9;
  one_gpu = SimulateOnOneGpu(plan, c, direct);
  EXPECT_NEAR(one_gpu.total_time, 96 / 10e9, 1e-18);
  // The same message without conversion moves its own bytes.
  c.pack_bandwidth = 1e12;
  one_gpu = SimulateOnOneGpu(MakePackedPlan(LinkClass::kSameNode), c, direct);
  EXPECT_NEAR(one_gpu.total_time, 128 / 100e9, 1e-18);
}

// Narrowing to fp8 (an fp32 source, an e4m3 message of 32 bytes): read 128 bytes, write 32, so
// (128 + 32) / 2 = 80 copied bytes at fp8_convert_bandwidth, whether a direct read does it or the
// Pack; the Unpack then copies fp8 to fp8 at pack_bandwidth.
TEST(SimulatorTest, ConversionsIntoFp8RunAtTheFp8ConvertRate) {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kFP8E4M3);
  ClusterSpec c = TestCluster();
  c.ranks_per_gpu = 2;
  c.fp8_convert_bandwidth = 10e9;
  SimOptions direct;
  direct.staging_budget = 0;
  direct.direct_reads = true;
  SimResult read = SimulateOnOneGpu(plan, c, direct);
  EXPECT_NEAR(read.total_time, 80 / 10e9, 1e-17);
  SimOptions staged = direct;
  staged.direct_reads = false;
  SimResult packed = SimulateOnOneGpu(plan, c, staged);
  EXPECT_NEAR(packed.total_time, 80 / 10e9 + 32 / 100e9 + 32 / 50e9, 1e-17);
  // A faster fp8 kernel than the GPU's copies: the copy rate limits the read.
  c.fp8_convert_bandwidth = 1e12;
  read = SimulateOnOneGpu(plan, c, direct);
  EXPECT_NEAR(read.total_time, 80 / 100e9, 1e-17);
}

// Rank 0 packs `messages` [1024, 1024] bf16 matrices of its source buffer, each narrowed into fp8
// e4m3 in its own 1 MiB staging slot, and sends each over a same-node link to rank 1, which
// receives it into a slot of its own and unpacks it into a destination buffer. Ops of message k:
// 4k the Pack, 4k + 1 the Send, 4k + 2 the Recv, 4k + 3 the Unpack.
constexpr int64_t kSide = 1024, kFp8Bytes = kSide * kSide;
TransferPlan NarrowingPlan(int messages) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", messages * 2 * kFp8Bytes}};
  for (int k = 0; k < messages; ++k) {
    plan.destination_buffers.push_back({1, "w" + std::to_string(k), kFp8Bytes});
    const int send_slot = plan.AddSlot(0, kFp8Bytes), recv_slot = plan.AddSlot(1, kFp8Bytes);
    const auto fp8 = [](Space space, int buffer) {
      return Matrix(DType::kFP8E4M3, space, buffer, 0, kSide, kSide, kSide);
    };
    Op op;
    op.kind = OpKind::kPack;
    op.bytes = kFp8Bytes;
    const int pack = plan.AddOp(
        op, {}, {{Matrix(DType::kBF16, Space::kSource, 0, k * 2 * kFp8Bytes, kSide, kSide, kSide),
                  fp8(Space::kStaging, send_slot)}});
    op.kind = OpKind::kSend;
    op.link = LinkClass::kSameNode;
    op.peer = 1;
    op.message = k;
    op.SetData(ByteRange(Space::kStaging, send_slot, 0, kFp8Bytes));
    plan.AddOp(op, {pack});
    op.kind = OpKind::kRecv;
    op.rank = 1;
    op.peer = 0;
    op.SetData(ByteRange(Space::kStaging, recv_slot, 0, kFp8Bytes));
    const int recv = plan.AddOp(op, {});
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.rank = 1;
    unpack.bytes = kFp8Bytes;
    plan.AddOp(unpack, {recv}, {{fp8(Space::kStaging, recv_slot), fp8(Space::kDestination, k)}});
  }
  return plan;
}

// One bf16 matrix narrowed to fp8 (2 MiB read, 1 MiB written) between GPUs 0 and 1 of a node:
// NVLink 10 GB/s, fp8 conversions 50 GB/s of (read + written) / 2 = 1.5 MiB. Packed on the sender
// (`auto` between GPUs), the Pack converts, 1.5 MiB / 50 GB/s, then the receiver reads the 1 MiB
// message over NVLink, 1 MiB / 10 GB/s, and its Unpack stays elided. Read wide (`never`), the
// receiver reads 2 MiB of bf16 over NVLink, 2 MiB / 10 GB/s. Staged, the Unpack copies the fp8
// at pack_bandwidth (50 GB/s) besides. On one GPU (two processes taking turns) `auto` keeps the
// wide read, 1.5 MiB of copied bytes capped at 50 GB/s; `always` packs there too: the Pack's
// 1.5 MiB at 50 GB/s, then the message through the GPU's memory, 1 MiB / 100 GB/s.
TEST(SimulatorTest, ASenderPacksNarrowingReadsBetweenGpusOnAuto) {
  const TransferPlan plan = NarrowingPlan(1);
  const double mib = static_cast<double>(kFp8Bytes);
  ClusterSpec c = TestCluster();
  c.fp8_convert_bandwidth = 50e9;
  SimOptions options;
  options.staging_budget = 0;
  options.direct_reads = true;
  const SimResult packed = SimulatePlan(plan, c, options);
  EXPECT_NEAR(packed.total_time, 1.5 * mib / 50e9 + mib / 10e9, 1e-15);
  EXPECT_DOUBLE_EQ(packed.nvlink_bytes, mib);
  EXPECT_NEAR(packed.op_times[0].end, 1.5 * mib / 50e9, 1e-15) << "the Pack runs";
  EXPECT_NEAR(packed.op_times[3].end, packed.op_times[2].end, 1e-15) << "the Unpack stays elided";
  options.convert_on_sender = ConvertOnSender::kNever;
  const SimResult wide = SimulatePlan(plan, c, options);
  EXPECT_NEAR(wide.total_time, 2 * mib / 10e9, 1e-15);
  EXPECT_DOUBLE_EQ(wide.nvlink_bytes, 2 * mib);
  SimOptions staged = options;
  staged.direct_reads = false;
  EXPECT_NEAR(SimulatePlan(plan, c, staged).total_time, 1.5 * mib / 50e9 + mib / 10e9 + mib / 50e9, 1e-15);

  c.ranks_per_gpu = 2;
  options.convert_on_sender = ConvertOnSender::kAuto;
  // The wide read's traffic is kept in floats (per send op): equal to 7 digits.
  EXPECT_NEAR(SimulateOnOneGpu(plan, c, options).total_time, 1.5 * mib / 50e9, 1e-12);
  options.convert_on_sender = ConvertOnSender::kAlways;
  EXPECT_NEAR(SimulateOnOneGpu(plan, c, options).total_time, 1.5 * mib / 50e9 + mib / 100e9, 1e-15);
}

// The same bf16 matrix narrowed to fp8 between two host-memory ranks (processes of one node, 1 GB/s
// a copy stream), whose copy loop moves 8 GB/s contiguous and converts bf16 into fp8 reading 2 GB/s:
// a conversion takes 8 times a contiguous copy of the fp8 bytes it writes (2 MiB read / 2 GB/s
// against 1 MiB / 8 GB/s). On `auto` host ranks do not pack (their offers name no GPU): the
// receiver converts as it reads, 8 MiB / 1 GB/s. On `always` the sender's Pack converts into its
// slot (8 MiB / 1 GB/s), then the receiver copies the 1 MiB of fp8 (1 MiB / 1 GB/s).
TEST(SimulatorTest, HostRanksConvertAtTheirConversionRateAndPackOnlyOnAlways) {
  const TransferPlan plan = NarrowingPlan(1);
  const double mib = static_cast<double>(kFp8Bytes);
  ClusterSpec c = TestCluster();
  c.host_memory_ranks = true;
  c.host_copy_bandwidth = 1e9;
  c.host_memory_bandwidth = 100e9;
  c.host_copy_row_rates = {{65536, 65536, 8e9}};
  c.host_convert_rates = {{DType::kBF16, DType::kFP8E4M3, 2e9}};
  SimOptions options;
  options.staging_budget = 0;
  options.direct_reads = true;
  const SimResult read = SimulatePlan(plan, c, options);
  EXPECT_NEAR(read.total_time, 8 * mib / 1e9, 1e-12);
  EXPECT_NEAR(read.op_times[0].end, 0, 1e-15) << "the Pack is elided";
  options.convert_on_sender = ConvertOnSender::kAlways;
  const SimResult packed = SimulatePlan(plan, c, options);
  EXPECT_NEAR(packed.op_times[0].end, 8 * mib / 1e9, 1e-12) << "the Pack converts";
  EXPECT_NEAR(packed.total_time, 9 * mib / 1e9, 1e-12);
}

// Three packed messages from rank 0 under a staging budget of two of their 1 MiB slots. As in the
// executor the sender holds a packed message's slot from its Pack until the receiver has read it:
// the first two Packs run one after the other on rank 0's stream (T = 1.5 MiB / 50 GB/s each),
// and the third waits for the first message to be read (were the slots freed with their Packs, it
// would start when the second Pack ends). NVLink is busy from T on: the first message alone until
// 2T (0.3 MiB), then the two share it, the first ending with 0.7 MiB of the second moved; the
// third Pack runs while the second message moves its last 0.3 MiB alone (the two end together),
// then the third message follows: T + 3 MiB / 10 GB/s. Read wide (`never`) they hold no slot, and
// the three reads, whose offers come at once, are one launch sharing NVLink: 3 x 2 MiB / 10 GB/s.
TEST(SimulatorTest, APackedReadHoldsItsSlotFromThePackUntilTheReadCompletes) {
  const TransferPlan plan = NarrowingPlan(3);
  const double mib = static_cast<double>(kFp8Bytes);
  ClusterSpec c = TestCluster();
  c.fp8_convert_bandwidth = 50e9;
  SimOptions options;
  options.staging_budget = 2 * kFp8Bytes;
  options.direct_reads = true;
  const SimResult packed = SimulatePlan(plan, c, options);
  EXPECT_NEAR(packed.total_time, 1.5 * mib / 50e9 + 3 * mib / 10e9, 1e-15);
  EXPECT_EQ(packed.staging_waits, 1);
  EXPECT_NEAR(packed.op_times[8].start, packed.op_times[1].end, 1e-15) << "the third Pack";
  options.convert_on_sender = ConvertOnSender::kNever;
  const SimResult wide = SimulatePlan(plan, c, options);
  EXPECT_NEAR(wide.total_time, 6 * mib / 10e9, 1e-15);
  EXPECT_EQ(wide.staging_waits, 0);
}

// Two processes on one GPU (ranks_per_gpu 2) take turns with their kernels: two Unpacks of 1 MB,
// each 50 GB/s alone on a GPU that copies 100 GB/s, take 2 MB / 50 GB/s = 40 us in turns, where
// one process a GPU runs both kernels at once (20 us). A copy (100 GB/s alone) beside an Unpack
// gets half the GPU's time, 50 GB/s, until it ends at 20 us with 0.5 MB of the Unpack done; the
// Unpack runs its other 0.5 MB alone at 50 GB/s, ending at 30 us.
TEST(SimulatorTest, KernelsOfProcessesSharingAGpuTakeTurns) {
  PlanBuilder b(2);
  b.Local(OpKind::kUnpack, 0, 1'000'000);
  b.Local(OpKind::kUnpack, 1, 1'000'000);
  ClusterSpec c = TestCluster();
  SimResult concurrent = SimulateOnOneGpu(b.plan(), c);
  EXPECT_NEAR(concurrent.total_time, 20e-6, 1e-12);
  c.ranks_per_gpu = 2;
  SimResult turns = SimulateOnOneGpu(b.plan(), c);
  EXPECT_NEAR(turns.total_time, 40e-6, 1e-12);

  PlanBuilder mixed(2);
  const int copy = mixed.Local(OpKind::kCopy, 0, 1'000'000);
  const int unpack = mixed.Local(OpKind::kUnpack, 1, 1'000'000);
  SimResult r = SimulateOnOneGpu(mixed.plan(), c);
  EXPECT_NEAR(r.op_times[copy].end, 20e-6, 1e-12);
  EXPECT_NEAR(r.op_times[unpack].end, 30e-6, 1e-12);
}

// Rank 0 sends rows [0, 320) of a [512, 64] bf16 matrix (40960 bytes) straight into rank 1's
// twin, which a Quantize op turns into 32768 bytes of fp8. As a quantizing read it quantizes block
// rows 0-1 as it reads (32768 of its bytes read, 16384 written as fp8, 8192 copied: 0.8 copied
// bytes a message byte) and the Quantize op quantizes only block rows 2-3 (16384 fp8 bytes, 1.5
// copied bytes each).
TransferPlan QuantizingReadPlan() { return MakeTwinReadPlan(512, 64, 0, 40960, 0); }

TEST(SimulatorTest, AQuantizingReadQuantizesItsBandsAndLeavesTheQuantizeTheRest) {
  const TransferPlan plan = QuantizingReadPlan();
  ClusterSpec c = TestCluster();
  c.quantize_bandwidth = 1e15;
  c.ranks_per_gpu = 2;
  SimOptions direct;
  direct.staging_budget = 0;
  direct.direct_reads = true;
  SimResult one_gpu = SimulateOnOneGpu(plan, c, direct);
  // The read's traffic is kept in floats (per send op): equal to 7 digits.
  EXPECT_NEAR(one_gpu.total_time, (40960 * 0.8 + 16384 * 1.5) / 100e9, 1e-13);
  SimOptions staged = direct;
  staged.quantizing_reads = false;
  SimResult twin = SimulateOnOneGpu(plan, c, staged);
  EXPECT_NEAR(twin.total_time, (40960 + 32768 * 1.5) / 100e9, 1e-18) << "every byte through the twin";
  // The bands' kernel writes at most quantize_bandwidth fp8 bytes a second: 2 x 10 GB/s of bf16
  // read for them, 25 GB/s of the message whose bands are 0.8 of it.
  c.quantize_bandwidth = 10e9;
  one_gpu = SimulateOnOneGpu(plan, c, direct);
  EXPECT_NEAR(one_gpu.total_time, 40960 / 25e9 + 16384 / 10e9, 1e-12);
  // Between GPUs the read's bf16 crosses NVLink (10 GB/s), then the Quantize op runs on GPU 1.
  EXPECT_NEAR(SimulatePlan(plan, c, direct).total_time, 40960 / 10e9 + 16384 / 10e9, 1e-12);
}

TEST(SimulatorTest, FixedCostsOccupyTheLinkTheyRunOn) {
  PlanBuilder b(4);
  for (int i = 0; i < 100; ++i) b.Message(0, 2, 1000);
  ClusterSpec c = TestCluster();
  c.nic_message_overhead = 10e-6;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 100 * 11e-6, 1e-7);
  c.nic_message_overhead = 100e-6;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 100 * 101e-6, 1e-6);

  PlanBuilder copies(1);
  for (int i = 0; i < 100; ++i) copies.Local(OpKind::kCopy, 0, 100'000);
  ClusterSpec k = TestCluster();
  k.kernel_overhead = 5e-6;
  EXPECT_NEAR(SimulatePlan(copies.plan(), k).total_time, 100 * (5e-6 + 1e-6), 1e-7);
}

TEST(SimulatorTest, EfficiencyScalesNicBandwidth) {
  PlanBuilder b(4);
  b.Message(0, 2, 1'000'000'000);
  ClusterSpec c = TestCluster();
  c.network_efficiency = 0.8;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 1.25, 1e-9);
}

TEST(SimulatorTest, TwoFlowsShareOneLinkThenTheSurvivorSpeedsUp) {
  // Both land on node 1's NIC 0: 0.5 GB/s each until the small one ends at t = 1, then the big one
  // has 0.5 GB left at 1 GB/s.
  PlanBuilder b(4);
  b.Message(0, 2, 1'000'000'000);
  b.Message(1, 2, 500'000'000);
  SimResult r = SimulatePlan(b.plan());
  EXPECT_NEAR(r.op_times[2].end, 1.0, 1e-9);
  EXPECT_NEAR(r.total_time, 1.5, 1e-9);
  ASSERT_FALSE(r.utilisation.empty());
  bool saw_rx = false;
  for (const LinkClassUsage& u : r.utilisation) {
    if (u.kind == ResourceKind::kNicRx) {
      saw_rx = true;
      EXPECT_EQ(u.links_used, 1);
      EXPECT_NEAR(u.max_utilisation, 1.0, 1e-9);  // busy the whole time
    }
  }
  EXPECT_TRUE(saw_rx);
}

TEST(SimulatorTest, MaxMinFairnessGivesLeftoverCapacityToTheUnconstrainedFlow) {
  // Link L1 = node 0 NIC 0 tx carries A and B; link L2 = node 1 NIC 1 rx carries B, C and D.
  // Max-min: B, C, D get 1/3 GB/s, A gets the remaining 2/3 of L1 (equal split would give 1/2).
  PlanBuilder b(6);
  auto a = b.Message(0, 2, 1'000'000'000);  // A: tx n0/nic0 -> rx n1/nic0
  b.Message(0, 3, 1'000'000'000);           // B: tx n0/nic0 -> rx n1/nic1
  b.Message(1, 3, 1'000'000'000);           // C: tx n0/nic1 -> rx n1/nic1
  b.Message(4, 3, 1'000'000'000);           // D: tx n2/nic0 -> rx n1/nic1
  SimResult r = SimulatePlan(b.plan());
  EXPECT_NEAR(r.op_times[a.first].end, 1.5, 1e-6);
  EXPECT_NEAR(r.total_time, 3.0, 1e-6);
}

TEST(SimulatorTest, ChainOfCopySendUnpackAddsUp) {
  PlanBuilder b(4);
  int copy = b.Local(OpKind::kPack, 0, 50'000'000'000);  // 1 s at 50 GB/s pack
  auto m = b.Message(0, 2, 1'000'000'000, {copy});        // 1 s on the network
  int unpack = b.Local(OpKind::kUnpack, 2, 50'000'000'000, {m.second});  // 1 s
  ClusterSpec c = TestCluster();
  c.kernel_overhead = 1e-3;
  SimResult r = SimulatePlan(b.plan(), c);
  EXPECT_NEAR(r.total_time, 3.002, 1e-9);
  // The unpack starts when the message ends; its launch cost is GPU time before its bytes.
  EXPECT_NEAR(r.op_times[unpack].start, 2.001, 1e-9);
  // The critical path is the whole chain, first op first.
  ASSERT_EQ(r.critical_path.size(), 3u);
  EXPECT_EQ(r.critical_path[0].op, copy);
  EXPECT_EQ(r.critical_path[1].op, m.first);
  EXPECT_EQ(r.critical_path[2].op, unpack);
  EXPECT_NE(r.critical_path[1].description.find("network"), std::string::npos);
}

TEST(SimulatorTest, QuantizeIsBoundByQuantizeBandwidthNotPackBandwidth) {
  PlanBuilder b(1);
  b.Local(OpKind::kQuantize, 0, 20'000'000'000);
  ClusterSpec c = TestCluster();
  c.quantize_bandwidth = 10e9;  // pack_bandwidth is 50e9
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 2.0, 1e-9);
  c.quantize_bandwidth = 40e9;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 0.5, 1e-9);
}

TEST(SimulatorTest, QuantizeTakesTheGpuMemoryOfItsReadsAndWrites) {
  // From bf16 it moves 3 bytes an fp8 byte, 1.5 copied bytes' worth of the GPU's memory: at
  // copy_bandwidth 100 GB/s it writes at most 66.7 GB/s, whatever its own rate.
  PlanBuilder b(1);
  b.Local(OpKind::kQuantize, 0, 10'000'000'000);
  ClusterSpec c = TestCluster();
  c.quantize_bandwidth = 1e12;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 0.15, 1e-9);
  // Beside a copy of 10 GB on the same GPU both share its memory: 25 GB of service at 100 GB/s.
  b.Local(OpKind::kCopy, 0, 10'000'000'000);
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 0.25, 1e-9);
}

TEST(SimulatorTest, CopyIsBoundByCopyBandwidth) {
  PlanBuilder b(1);
  b.Local(OpKind::kCopy, 0, 100'000'000'000);
  EXPECT_NEAR(SimulatePlan(b.plan()).total_time, 1.0, 1e-9);
}

TEST(SimulatorTest, FanOutSharesTheSendersNic) {
  // r0 -> r1 over NVLink (0.1 s); r0 -> r2 and r0 -> r3 share node 0's NIC 0 (2 s).
  PlanBuilder b(4);
  auto nv = b.Message(0, 1, 1'000'000'000);
  b.Message(0, 2, 1'000'000'000);
  b.Message(0, 3, 1'000'000'000);
  SimResult r = SimulatePlan(b.plan());
  EXPECT_NEAR(r.op_times[nv.second].end, 0.1, 1e-9);
  EXPECT_NEAR(r.total_time, 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(r.nvlink_bytes, 1e9);
  EXPECT_DOUBLE_EQ(r.network_bytes, 2e9);
}

TEST(SimulatorTest, ForwardIsStoreAndForwardPerChunkAndChunksPipeline) {
  // r0 -> r2 over the network, r2 forwards to r3 over NVLink. One 1 GB chunk: 1 s + 0.1 s.
  {
    PlanBuilder b(4);
    auto in = b.Message(0, 2, 1'000'000'000);
    b.Message(2, 3, 1'000'000'000, {in.second}, {}, OpKind::kForward);
    EXPECT_NEAR(SimulatePlan(b.plan()).total_time, 1.1, 1e-9);
  }
  // Two 0.5 GB chunks, sent one after the other: the first forward overlaps the second receive.
  {
    PlanBuilder b(4);
    auto in0 = b.Message(0, 2, 500'000'000);
    auto in1 = b.Message(0, 2, 500'000'000, {in0.first}, {in0.second});
    b.Message(2, 3, 500'000'000, {in0.second}, {}, OpKind::kForward);
    auto f1 = b.Message(2, 3, 500'000'000, {in1.second}, {}, OpKind::kForward);
    SimResult r = SimulatePlan(b.plan());
    EXPECT_NEAR(r.total_time, 1.05, 1e-9);
    EXPECT_NEAR(r.op_times[f1.second].start, 1.0, 1e-9);
  }
}

TEST(SimulatorTest, MessageStartsWhenBothSidesAreReady) {
  // The receiver is busy with a 1 s copy first; the send waits for it (rendezvous).
  PlanBuilder b(4);
  int copy = b.Local(OpKind::kCopy, 2, 100'000'000'000);
  auto m = b.Message(0, 2, 1'000'000'000, {}, {copy});
  SimResult r = SimulatePlan(b.plan());
  EXPECT_NEAR(r.op_times[m.first].start, 1.0, 1e-9);
  EXPECT_NEAR(r.total_time, 2.0, 1e-9);
  ASSERT_EQ(r.critical_path.size(), 2u);
  EXPECT_EQ(r.critical_path[0].op, copy);
}

TEST(SimulatorTest, HostStagingIsBoundByPcieAndAddsChunkDelay) {
  PlanBuilder b(4);
  b.Message(0, 2, 1'000'000'000);
  ClusterSpec c = TestCluster();
  c.gpu_direct = false;
  c.pcie_bandwidth = 0.5e9;
  c.staging_chunk_bytes = 5'000'000;
  // 1 GB at 0.5 GB/s, plus one 5 MB chunk stored and forwarded at each end (2 x 10 ms).
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 2.02, 1e-9);
}

TEST(SimulatorTest, OversubscribedSpineLimitsCrossRailTraffic) {
  PlanBuilder b(4);
  b.Message(0, 3, 1'000'000'000);  // node 0 NIC 0 -> node 1 NIC 1: cross-rail
  ClusterSpec c = TestCluster();
  c.spine_bandwidth_per_node = 0.25e9;
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 4.0, 1e-9);
  c.rail_optimized = false;  // any-to-any fabric: no spine hop modelled
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 1.0, 1e-9);
}

TEST(SimulatorTest, IngressSeriesAccountsForEveryNetworkByte) {
  PlanBuilder b(4);
  b.Message(0, 2, 1'000'000'000);
  b.Message(1, 3, 300'000'000);
  SimOptions o;
  o.record_ingress = true;
  o.ingress_buckets = 16;
  SimResult r = SimulatePlan(b.plan(), TestCluster(), o);
  ASSERT_EQ(r.ingress.bytes.size(), 2u);
  double node1 = 0;
  for (double v : r.ingress.bytes[1]) node1 += v;
  EXPECT_NEAR(node1, 1.3e9, 1e3);
  EXPECT_GE(r.ingress.bucket_seconds * 16, r.total_time);
}

TEST(SimulatorTest, ProgressiveFillingFixesLinksInOrderOfTheirRisingShares) {
  // Ranks are GPUs, 2 a node, NIC = GPU; every link 1 GB/s. Links: X = tx of r0 (F1, F2, F8),
  // Y = rx of r2 (F1, F6), Z = rx of r3 (F2..F5). Shares: Z 1/4, X 1/3, Y 1/2. Z fixes F2..F5 at
  // 1/4, which raises X's share to (1 - 1/4) / 2 = 3/8 (above its first 1/3, still below Y's 1/2):
  // X fixes F1 and F8 at 3/8, and F6 gets what Y has left, 5/8. Each flow carries 1 s of its rate,
  // so every op ends at t = 1 exactly when the rates are these.
  PlanBuilder b(9);
  b.Message(0, 2, 375'000'000);  // F1: X, Y
  b.Message(0, 3, 250'000'000);  // F2: X, Z
  b.Message(1, 3, 250'000'000);  // F3: Z
  b.Message(4, 3, 250'000'000);  // F4: Z
  b.Message(5, 3, 250'000'000);  // F5: Z
  b.Message(6, 2, 625'000'000);  // F6: Y
  b.Message(0, 8, 375'000'000);  // F8: X
  SimResult r = SimulatePlan(b.plan());
  for (size_t op = 0; op < r.op_times.size(); ++op) {
    EXPECT_NEAR(r.op_times[op].end, 1.0, 1e-9) << "op " << op;
  }
}

TEST(SimulatorTest, AClassThatGoesIdleAndReturnsKeepsItsLinksAndRates) {
  // P (r0 -> r2, 1 GB) runs alone at 1 GB/s. Q (r1 -> r5, 0.5 GB) ends at 0.5 s, its class goes
  // idle, and at that instant R (r5 -> r2, 0.5 GB, after Q's receive) starts beside P on r2's rx
  // link while S (r1 -> r5 again, 0.25 GB, after Q's send) brings Q's class back. S runs alone at
  // 1 GB/s to 0.75 s; P's last 0.5 GB and R share r2's rx at 0.5 GB/s each until 1.5 s.
  PlanBuilder b(6);
  auto p = b.Message(0, 2, 1'000'000'000);
  auto q = b.Message(1, 5, 500'000'000);
  auto r = b.Message(5, 2, 500'000'000, {q.second});
  auto s = b.Message(1, 5, 250'000'000, {q.first});
  SimResult result = SimulatePlan(b.plan());
  EXPECT_NEAR(result.op_times[q.second].end, 0.5, 1e-9);
  EXPECT_NEAR(result.op_times[s.second].start, 0.5, 1e-9);
  EXPECT_NEAR(result.op_times[s.second].end, 0.75, 1e-9);
  EXPECT_NEAR(result.op_times[r.second].start, 0.5, 1e-9);
  EXPECT_NEAR(result.op_times[r.second].end, 1.5, 1e-9);
  EXPECT_NEAR(result.op_times[p.second].end, 1.5, 1e-9);
}

// One node of `ranks` host-memory ranks (local processes, as on the development host): each
// stream of copies at most `stream_rate` bytes/s, all of the node's together `node_rate`.
ClusterSpec HostNode(int ranks, double stream_rate, double node_rate) {
  ClusterSpec c = TestCluster();
  c.gpus_per_node = ranks;
  c.nics_per_node = 1;
  c.host_memory_ranks = true;
  c.host_copy_bandwidth = stream_rate;
  c.host_memory_bandwidth = node_rate;
  return c;
}

TEST(SimulatorTest, ManyFlowsOnOneLinkFinishTogether) {
  PlanBuilder b(4);
  for (int i = 0; i < 100; ++i) b.Message(0, 2, 10'000'000);
  SimResult r = SimulatePlan(b.plan());
  EXPECT_NEAR(r.total_time, 1.0, 1e-6);
  EXPECT_EQ(r.peak_link_classes, 1);  // 100 flows with the same links form one class
}

// Host-memory ranks: two messages of one node at 1 GB/s a stream take 1 s each side by side, but
// through a loopback limited to 1 GB/s for the whole node (TCP on few cores) they take 2 s.
TEST(SimulatorTest, LoopbackBandwidthIsSharedByEveryMessageOfTheNode) {
  PlanBuilder b(4);
  b.Message(0, 1, 1'000'000'000);
  b.Message(2, 3, 1'000'000'000);
  ClusterSpec c = HostNode(4, 1e9, 100e9);
  EXPECT_NEAR(SimulatePlan(b.plan(), c).total_time, 1.0, 1e-6);
  c.host_message_bandwidth = 1e9;
  SimResult r = SimulatePlan(b.plan(), c);
  EXPECT_NEAR(r.total_time, 2.0, 1e-6);
  EXPECT_EQ(r.peak_link_classes, 1);  // same links (host_mem, loopback of node 0): one class
  ASSERT_FALSE(r.critical_path.empty());
  EXPECT_NE(r.critical_path.back().description.find("loopback[node 0]"), std::string::npos)
      << r.critical_path.back().description;
}

// One TCP stream alone gets less than several together (host_message_stream_bandwidth): with a
// 2 GB/s loopback and 1 GB/s a stream, one 1 GB message takes 1 s, and two side by side take
// 1 s too, where without the stream cap one alone would take the whole loopback (0.5 s).
TEST(SimulatorTest, OneLoopbackStreamIsCappedBelowTheNodesRate) {
  ClusterSpec c = HostNode(4, 10e9, 100e9);
  c.host_message_bandwidth = 2e9;
  PlanBuilder one(4);
  one.Message(0, 1, 1'000'000'000);
  PlanBuilder two(4);
  two.Message(0, 1, 1'000'000'000);
  two.Message(2, 3, 1'000'000'000);
  EXPECT_NEAR(SimulatePlan(one.plan(), c).total_time, 0.5, 1e-6);
  c.host_message_stream_bandwidth = 1e9;
  EXPECT_NEAR(SimulatePlan(one.plan(), c).total_time, 1.0, 1e-6);
  EXPECT_NEAR(SimulatePlan(two.plan(), c).total_time, 1.0, 1e-6);
  c.host_message_stream_bandwidth = -1;
  EXPECT_FALSE(c.Validate().ok());
}

// The stream rate is a rank's (its transport's one progress thread), not a connection's: a rank
// that receives one 1 GB message while it sends another (a broadcast chain's relay) moves 2 GB
// through its thread, 2 s at 1 GB/s, where two separate pairs take 1 s; so does a rank sending
// to two ranks at once.
TEST(SimulatorTest, AHostRanksSendsAndReceivesShareItsTransportThread) {
  ClusterSpec c = HostNode(4, 10e9, 100e9);
  c.host_message_bandwidth = 10e9;
  c.host_message_stream_bandwidth = 1e9;
  PlanBuilder relay(4);
  relay.Message(0, 1, 1'000'000'000);
  relay.Message(1, 2, 1'000'000'000);
  PlanBuilder fan_out(4);
  fan_out.Message(0, 1, 1'000'000'000);
  fan_out.Message(0, 2, 1'000'000'000);
  PlanBuilder pairs(4);
  pairs.Message(0, 1, 1'000'000'000);
  pairs.Message(2, 3, 1'000'000'000);
  EXPECT_NEAR(SimulatePlan(pairs.plan(), c).total_time, 1.0, 1e-6);
  const SimResult r = SimulatePlan(relay.plan(), c);
  EXPECT_NEAR(r.total_time, 2.0, 1e-6);
  ASSERT_FALSE(r.critical_path.empty());
  EXPECT_NE(r.critical_path.back().description.find("transport_thread[rank 1]"), std::string::npos)
      << r.critical_path.back().description;
  EXPECT_NEAR(SimulatePlan(fan_out.plan(), c).total_time, 2.0, 1e-6);
}

// Host-memory ranks (the development host's cluster files, tools/sim/calibrate_host.py): every
// rank's messages share the node's host_mem, so 4 pairs of ranks streaming 1 GB each at once take
// 4x as long as one pair alone when the node's rate together is one stream's; and each message's
// fixed cost holds that shared link, so the node pays the costs of all pairs one after the other
// (4 x 100 messages x (10 us + 1 us)), unless the node's rate holds several streams at once.
TEST(SimulatorTest, HostMemoryRanksShareTheNodesCopyRateAndMessageCosts) {
  ClusterSpec c = HostNode(8, 1e9, 1e9);
  PlanBuilder one(8);
  one.Message(0, 1, 1'000'000'000);
  EXPECT_NEAR(SimulatePlan(one.plan(), c).total_time, 1.0, 1e-6);
  PlanBuilder pairs(8);
  for (int p = 0; p < 4; ++p) pairs.Message(2 * p, 2 * p + 1, 1'000'000'000);
  EXPECT_NEAR(SimulatePlan(pairs.plan(), c).total_time, 4.0, 1e-6);

  PlanBuilder small(8);
  for (int i = 0; i < 100; ++i) {
    for (int p = 0; p < 4; ++p) small.Message(2 * p, 2 * p + 1, 1000);
  }
  c.nvlink_message_overhead = 10e-6;
  EXPECT_NEAR(SimulatePlan(small.plan(), c).total_time, 400 * 11e-6, 1e-7);
  c.host_memory_bandwidth = 4e9;  // room for the 4 streams at once: each pair pays its own
  EXPECT_NEAR(SimulatePlan(small.plan(), c).total_time, 100 * 11e-6, 1e-7);
}

// Messages are matched by id whether the ids are small (the planner's, numbered from 0) or not:
// the same plan with its ids moved above the op count predicts the same times.
TEST(SimulatorTest, MatchesMessagesWhateverTheirIds) {
  PlanBuilder b(4);
  const auto first = b.Message(0, 2, 1000);
  b.Message(1, 3, 2000);
  b.Message(2, 0, 500, {first.second});
  TransferPlan sparse = b.plan();
  for (Op& op : sparse.ops) {
    if (IsMessageKind(op.kind)) op.message = 1000000 + 7 * op.message;
  }
  const SimResult dense_result = SimulatePlan(b.plan());
  const SimResult sparse_result = SimulatePlan(sparse);
  EXPECT_EQ(dense_result.num_messages, 3);
  EXPECT_EQ(sparse_result.num_messages, 3);
  ASSERT_EQ(dense_result.op_times.size(), sparse_result.op_times.size());
  for (size_t i = 0; i < dense_result.op_times.size(); ++i) {
    EXPECT_EQ(dense_result.op_times[i].end, sparse_result.op_times[i].end) << "op " << i;
  }
  EXPECT_GT(dense_result.total_time, 0);
}

TEST(SimulatorTest, RejectsMalformedPlans) {
  ClusterSpec c = TestCluster();
  {
    PlanBuilder b(4);
    Op s;
    s.kind = OpKind::kSend;
    s.rank = 0;
    s.peer = 2;
    s.message = 7;
    s.bytes = 10;
    b.plan().AddOp(s);
    Result<SimResult> r = Simulate(b.plan(), c, RankMapping::Identity(4));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("message 7 has no receiver"), std::string::npos);
  }
  {
    PlanBuilder b(4);
    int a = b.Local(OpKind::kCopy, 0, 10);
    b.plan().SetDeps(a, {1});
    b.Local(OpKind::kCopy, 0, 10, {a});
    Result<SimResult> r = Simulate(b.plan(), c, RankMapping::Identity(4));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("never ran"), std::string::npos);
  }
  {
    PlanBuilder b(4);
    int a = b.Local(OpKind::kCopy, 0, 10);
    b.Local(OpKind::kCopy, 1, 10, {a});
    Result<SimResult> r = Simulate(b.plan(), c, RankMapping::Identity(4));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("depends on op 0 of rank 0"), std::string::npos);
  }
  {
    PlanBuilder b(4);
    auto m = b.Message(0, 2, 10);
    b.plan().ops[m.second].bytes = 11;
    EXPECT_FALSE(Simulate(b.plan(), c, RankMapping::Identity(4)).ok());
  }
  {
    PlanBuilder b(4);
    b.Message(0, 2, 10);
    c.num_nodes = 1;  // only 2 GPUs
    Result<SimResult> r = Simulate(b.plan(), c, RankMapping::Identity(4));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("only 2 GPUs"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry::sim

namespace ferry::sim {
namespace {

// Rank 0 sends 4 tiny messages to 4 ranks on other nodes; each costs mostly the 10 us latency.
// Unlimited, they overlap (one latency in all); with max_in_flight = 1 rank 0 posts one at a time
// in (round, id) order, so they take four latencies one after the other.
TEST(SimulatorTest, MaxInFlightLimitsPostedMessagesPerRank) {
  ClusterSpec cluster = TestCluster();
  cluster.nic_latency = 10e-6;
  PlanBuilder b(10);
  std::vector<int> sends;
  for (int peer : {2, 4, 6, 8}) sends.push_back(b.Message(0, peer, 1000).first);
  b.plan().ops[sends[0]].round = 3;  // posted last under the limit
  SimOptions unlimited;
  unlimited.max_in_flight = 0;
  SimResult all = SimulatePlan(b.plan(), cluster, unlimited);
  EXPECT_NEAR(all.total_time, 10e-6 + 4 * 1000 / 1e9, 1e-7);
  SimOptions one;
  one.max_in_flight = 1;
  SimResult serial = SimulatePlan(b.plan(), cluster, one);
  EXPECT_NEAR(serial.total_time, 4 * (10e-6 + 1000 / 1e9), 1e-7);
  // The op with the highest round went last.
  EXPECT_NEAR(serial.op_times[sends[0]].end, serial.total_time, 1e-9);

  SimOptions bad;
  bad.max_in_flight = -1;
  EXPECT_FALSE(Simulate(b.plan(), cluster, RankMapping::Identity(10), bad).ok());
}

// Ranks 0 and 2 each receive from the other before they send to it (receives in round 0, sends
// in round 1). Had receives taken window slots, each rank's one slot would hold its receive and
// neither send would ever be posted; receives are posted when ready, so any window completes.
TEST(SimulatorTest, NoWindowDeadlocksCrossedExchanges) {
  PlanBuilder b(4);
  std::pair<int, int> to2 = b.Message(0, 2, 1'000'000);
  std::pair<int, int> to0 = b.Message(2, 0, 1'000'000);
  b.plan().ops[to2.first].round = 1;
  b.plan().ops[to0.first].round = 1;
  for (int window : {1, 2, 0}) {
    SimOptions options;
    options.max_in_flight = window;
    EXPECT_NEAR(SimulatePlan(b.plan(), TestCluster(), options).total_time, 1e-3, 1e-9)
        << "window " << window;
  }
}

// Rank 0 receives four 1000-byte messages, message k (round k) from rank sender(k) reading its
// source buffer 0, each into its own staging slot that an Unpack then empties into bytes
// [1000 k, 1000 (k + 1)) of destination buffer 0; the messages' ops take `link` when given.
TransferPlan FourReceivesThroughSlots(int ranks, const std::function<int(int)>& sender,
                                      std::optional<LinkClass> link = std::nullopt) {
  PlanBuilder b(ranks);
  TransferPlan& plan = b.plan();
  for (int k = 0; k < 4; ++k) {
    const int slot = plan.AddSlot(0, 1000);
    const auto [send, recv] = b.Message(sender(k), 0, 1000);
    if (link) {
      for (int op : {send, recv}) plan.ops[op].link = *link;
    }
    plan.ops[send].data = {Space::kSource, 0, 0};
    plan.ops[recv].data = {Space::kStaging, slot, 0};
    plan.ops[recv].round = k;
    const Region from{Space::kStaging, slot, 0, DType::kUInt8, 1, {1000}, {1}};
    const Region to{Space::kDestination, 0, 1000 * k, DType::kUInt8, 1, {1000}, {1}};
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.rank = 0;
    unpack.round = k;
    unpack.bytes = 1000;
    plan.AddOp(unpack, {recv}, {{from, to}});
  }
  return plan;
}

// Rank 0 receives four 1000-byte messages from ranks 2, 3, 4 and 5 (other nodes, one NIC each),
// each into its own staging slot that an Unpack then empties. Unlimited, the four share rank 0's
// NIC, 4 us, then the four Unpacks run one after another on its stream, 20 ns each (50 GB/s). With the staging budget at the plan's need (one 1024-byte slot: the plan-order layout
// puts every slot at offset 0), a receive waits for the previous Unpack to free the slot, as the
// executor's placement makes it: 4 x (1 us + 20 ns, an Unpack alone at 50 GB/s). Less than that is refused, naming the need.
TEST(SimulatorTest, TheStagingBudgetMakesReceivesWaitForSlots) {
  const TransferPlan plan = FourReceivesThroughSlots(6, [](int k) { return 2 + k; });
  SimOptions unlimited;
  unlimited.staging_budget = 0;
  EXPECT_NEAR(SimulatePlan(plan, TestCluster(), unlimited).total_time, 4e-6 + 80e-9, 1e-10);
  SimOptions tight;
  tight.staging_budget = 1024;
  const SimResult waited = SimulatePlan(plan, TestCluster(), tight);
  EXPECT_NEAR(waited.total_time, 4 * (1e-6 + 20e-9), 1e-10);
  EXPECT_EQ(waited.staging_waits, 3);
  SimOptions roomy;  // every slot fits at once: nobody waits
  roomy.staging_budget = 4096;
  EXPECT_EQ(SimulatePlan(plan, TestCluster(), roomy).staging_waits, 0);
  SimOptions small;
  small.staging_budget = 1023;
  Result<SimResult> refused = Simulate(plan, TestCluster(), RankMapping::Identity(6), small);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rank 0 needs 1.00 KiB = 1024 bytes of staging"), std::string::npos)
      << refused.status().ToString();
}

// The same four receives from rank 1, on rank 0's node (10 GB/s of NVLink), at the budget of one
// slot. Staged, each receive waits for the previous Unpack: 4 x (100 ns + 20 ns). As direct reads
// (the executor's default) they hold no slot, as the executor stages them: the Unpacks are elided
// and the receiver copies straight into the destination, the four reads sharing NVLink, 400 ns.
TEST(SimulatorTest, DirectReadsHoldNoStagingOfTheirElidedOps) {
  TransferPlan plan = FourReceivesThroughSlots(2, [](int) { return 1; }, LinkClass::kSameNode);
  plan.source_buffers = {{1, "w", 1000}};
  plan.destination_buffers = {{0, "d", 4000}};
  SimOptions staged;
  staged.staging_budget = 1024;
  const SimResult waited = SimulatePlan(plan, TestCluster(), staged);
  EXPECT_NEAR(waited.total_time, 4 * (100e-9 + 20e-9), 1e-13);
  EXPECT_EQ(waited.staging_waits, 3);
  SimOptions direct = staged;
  direct.direct_reads = true;
  const SimResult read = SimulatePlan(plan, TestCluster(), direct);
  EXPECT_NEAR(read.total_time, 400e-9, 1e-13);
  EXPECT_EQ(read.staging_waits, 0);
}

// A rank's kernels run one after another on its one CUDA stream, in the order they were launched
// (core/runtime/rank_run_cuda.cc), where kernels of different ranks run side by side. Two Unpacks
// of 1 MB on rank 0, each capped at 50 GB/s: the first ends at 20 us, the second at 40 us (shared
// fairly, as two kernels capped at 50 GB/s on a 100 GB/s GPU, both would end at 20 us); on ranks
// 0 and 1 of one GPU without time slicing (ranks_per_gpu 1) both end at 20 us. The second's wait
// for the stream is on the critical path. Four direct reads of 1000 bytes from rank 1 into rank 0
// (10 GB/s NVLink, 100 ns each alone) whose offers come at once are one launch of rank 0
// (kernel_stream.h): they share NVLink and end together at 400 ns. (Reads that come one by one:
// tests/tools/sim/kernel_stream_test.cc.)
TEST(SimulatorTest, ARanksKernelsRunOneAfterAnotherOnItsStream) {
  PlanBuilder one(2);
  const int first = one.Local(OpKind::kUnpack, 0, 1'000'000);
  const int second = one.Local(OpKind::kUnpack, 0, 1'000'000);
  const SimResult r = SimulatePlan(one.plan());
  EXPECT_NEAR(r.op_times[first].end, 20e-6, 1e-12);
  EXPECT_NEAR(r.op_times[second].start, 20e-6, 1e-12);
  EXPECT_NEAR(r.op_times[second].end, 40e-6, 1e-12);
  ASSERT_EQ(r.critical_path.size(), 2u);
  EXPECT_EQ(r.critical_path[0].op, first);
  EXPECT_EQ(r.critical_path[1].op, second);

  PlanBuilder two(2);
  two.Local(OpKind::kUnpack, 0, 1'000'000);
  two.Local(OpKind::kUnpack, 1, 1'000'000);
  EXPECT_NEAR(SimulateOnOneGpu(two.plan(), TestCluster()).total_time, 20e-6, 1e-12);

  TransferPlan reads = FourReceivesThroughSlots(2, [](int) { return 1; }, LinkClass::kSameNode);
  reads.source_buffers = {{1, "w", 1000}};
  reads.destination_buffers = {{0, "d", 4000}};
  SimOptions direct;
  direct.staging_budget = 0;
  direct.direct_reads = true;
  const SimResult together = SimulatePlan(reads, TestCluster(), direct);
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(together.op_times[3 * k].end, 400e-9, 1e-13) << "read " << k;
  }
}

// Rank 1's bf16 twin (32 KiB) under a 1 KiB staging budget. A read of the whole [256, 64] matrix
// quantizes every block as it reads, so the executor leaves the twin out of staging
// (ElideQuantizedTwins) and the simulator must too: the plan runs without waiting. Through the
// twin (quantizing reads off), or with a read of rows [0, 160) that leaves block row 1 to the
// Quantize op, the twin needs its 32 KiB, which the budget refuses, naming the need.
TEST(SimulatorTest, TwinsTheReadsQuantizeWholeTakeNoStaging) {
  ClusterSpec c = TestCluster();
  c.ranks_per_gpu = 2;
  SimOptions direct;
  direct.staging_budget = 1024;
  direct.direct_reads = true;
  SimResult whole = SimulateOnOneGpu(MakeTwinReadPlan(256, 64, 0, 32768, 0), c, direct);
  EXPECT_EQ(whole.staging_waits, 0);
  SimOptions staged = direct;
  staged.quantizing_reads = false;
  for (const auto& [plan, options] : {std::pair{MakeTwinReadPlan(256, 64, 0, 32768, 0), staged},
                                      std::pair{MakeTwinReadPlan(256, 64, 0, 20480, 0), direct}}) {
    Result<SimResult> refused = Simulate(plan, c, RankMapping{{0, 0}}, options);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("rank 1 needs 32.0 KiB = 32768 bytes of staging"), std::string::npos)
        << refused.status().ToString();
  }
}

// A (0 -> 2, 1 GB) runs alone until B (1 -> 2, 0.5 GB) joins at 0.25 s behind a 25 GB copy; then
// they share node 1's NIC: B ends at 1.25 s, A at 1.5 s. Batching rate recomputations within
// rate_batch_window must not change that beyond the window, and exactly-simultaneous batching
// (window 0) not at all.
TEST(SimulatorTest, RateBatchWindowKeepsTimesWithinTheWindow) {
  PlanBuilder b(4);
  int copy = b.Local(OpKind::kCopy, 1, 25'000'000'000);
  b.Message(0, 2, 1'000'000'000);
  std::pair<int, int> late = b.Message(1, 2, 500'000'000, {copy});
  for (double window : {0.0, 1e-6}) {
    SimOptions options;
    options.rate_batch_window = window;
    SimResult r = SimulatePlan(b.plan(), TestCluster(), options);
    EXPECT_NEAR(r.op_times[late.first].start, 0.25, 1e-9) << "window " << window;
    EXPECT_NEAR(r.op_times[late.first].end, 1.25, 1e-9 + 2 * window) << "window " << window;
    EXPECT_NEAR(r.total_time, 1.5, 1e-9 + 2 * window) << "window " << window;
  }
  SimOptions bad;
  bad.rate_batch_window = -1;
  EXPECT_FALSE(Simulate(b.plan(), TestCluster(), RankMapping::Identity(4), bad).ok());
}

// Four senders on four nodes share the receiver's NIC (1 GB/s), 0.25 GB/s each: A (0.25 GB) ends
// at 1 s. Recomputing at once (slack 0 or the default 1%), B, C and D take 1/3 GB/s: B (0.5 GB)
// ends at 1.75 s, C and D (1 GB) at 2.75 s. With a slack of 30% the quarter A frees stays idle:
// B ends at 2 s, when half the NIC is idle, so C and D take 0.5 GB/s for their last 0.5 GB: 3 s.
TEST(SimulatorTest, RateSlackLeavesFreedCapacityIdleUntilItExceedsTheSlack) {
  PlanBuilder b(10);
  const std::pair<int, int> a = b.Message(2, 0, 250'000'000);
  const std::pair<int, int> bb = b.Message(4, 0, 500'000'000);
  b.Message(6, 0, 1'000'000'000);
  b.Message(8, 0, 1'000'000'000);
  for (double slack : {0.0, SimOptions{}.rate_slack, 0.3}) {
    SimOptions options;
    options.rate_slack = slack;
    const SimResult r = SimulatePlan(b.plan(), TestCluster(), options);
    const bool lazy = slack > 0.25;
    EXPECT_NEAR(r.op_times[a.first].end, 1.0, 1e-9) << "slack " << slack;
    EXPECT_NEAR(r.op_times[bb.first].end, lazy ? 2.0 : 1.75, 1e-9) << "slack " << slack;
    EXPECT_NEAR(r.total_time, lazy ? 3.0 : 2.75, 1e-9) << "slack " << slack;
  }
  SimOptions bad;
  bad.rate_slack = 1;
  EXPECT_FALSE(Simulate(b.plan(), TestCluster(), RankMapping::Identity(10), bad).ok());
}

// 40 senders on 40 nodes each keep two chains of 10 chunks moving into one receiving NIC: 40
// flow classes on one link. Recomputing every touched link costs a recomputation of all 40 per
// chunk; at the default slack a chunk that replaces a finished one in the same class keeps the
// class's rate, and only chains that end (capacity freed beyond the slack) recompute the link.
// The predictions agree to 0.1%.
TEST(SimulatorTest, RateSlackBoundsRateUpdatesPerMessageWithManyClassesOnALink) {
  constexpr int kSenders = 40;
  PlanBuilder b(2 * kSenders + 2);
  for (int i = 1; i <= kSenders; ++i) {
    for (int chain = 0; chain < 2; ++chain) {
      int previous = -1;
      for (int k = 0; k < 10; ++k) {
        // Sizes that differ from chunk to chunk, so that chunks end at different instants.
        const int64_t bytes = 1'000'000 + (i * 7919 + chain * 104'729 + k * 1'299'709) % 900'001;
        std::vector<int> deps;
        if (previous >= 0) deps.push_back(previous);
        previous = b.Message(2 * i, 0, bytes, deps).first;
      }
    }
  }
  SimOptions every_link;
  every_link.rate_slack = 0;
  const SimResult exact = SimulatePlan(b.plan(), TestCluster(), every_link);
  const SimResult lazy = SimulatePlan(b.plan());
  ASSERT_EQ(exact.num_messages, 2 * kSenders * 10);
  EXPECT_GE(lazy.peak_link_classes, kSenders);
  const double exact_per_message =
      static_cast<double>(exact.num_class_updates) / static_cast<double>(exact.num_messages);
  const double lazy_per_message =
      static_cast<double>(lazy.num_class_updates) / static_cast<double>(lazy.num_messages);
  EXPECT_GT(exact_per_message, 30);
  EXPECT_LT(lazy_per_message, 5);
  EXPECT_NEAR(lazy.total_time, exact.total_time, 1e-3 * exact.total_time);
}

}  // namespace
}  // namespace ferry::sim
