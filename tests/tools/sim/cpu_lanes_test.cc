// Tests for the simulator's CPU lanes (ClusterSpec::op_post_overhead, tensor_load_overhead):
// hand-computed times of ops waiting for their rank's posting lane and for the gather-and-
// broadcast consumer's weight-loading lane, predictions that move with the overheads, the reshard
// untouched by weight loading, windows of any size still completing, and the starts a posting
// lane spreads sharing one rate recomputation (the batch window of four holds).
#include <gtest/gtest.h>

#include "tools/sim/simulator.h"

namespace ferry::sim {
namespace {

// 2 GPUs and 2 NICs (1 GB/s) a node, no latencies or fixed costs but the lanes a test sets.
ClusterSpec LaneCluster() {
  ClusterSpec c;
  c.name = "lanes";
  c.gpus_per_node = 2;
  c.nics_per_node = 2;
  c.nic_bandwidth = 1e9;
  c.nic_latency = 0;
  c.nic_message_overhead = 0;
  c.network_efficiency = 1;
  c.cross_rail_latency = 0;
  c.nvlink_latency = 0;
  c.nvlink_message_overhead = 0;
  c.kernel_overhead = 0;
  return c;
}

std::vector<OpTime> OpTimes(const TransferPlan& plan, const ClusterSpec& cluster,
                            SimOptions options = {}) {
  options.record_op_times = true;
  Result<SimResult> r = Simulate(plan, cluster, RankMapping::Identity(plan.num_ranks), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->op_times : std::vector<OpTime>{};
}

// An Unpack on `rank` of `tensors` 16-byte tensors from staging slot `slot` into destination
// buffer `buffer` (or, with `to_staging`, into the slot itself, as the root's gather does).
// Its bytes are 0, so only the lanes take time.
int AddUnpack(TransferPlan& plan, int rank, int slot, int buffer, int tensors,
              bool to_staging = false) {
  std::vector<CopyPair> pairs;
  for (int i = 0; i < tensors; ++i) {
    const Region from = Region::Bytes(Space::kStaging, slot, 16 * i, 16);
    const Region to = to_staging ? Region::Bytes(Space::kStaging, slot, 16 * (i + tensors), 16)
                                 : Region::Bytes(Space::kDestination, buffer, 16 * i, 16);
    pairs.push_back({from, to});
  }
  Op op;
  op.kind = OpKind::kUnpack;
  op.rank = rank;
  return plan.AddOp(op, {}, pairs);
}

// Rank 0 unpacks three buckets of 2 tensors, rank 1 one of 1 tensor, at 10 us a tensor: rank 0's
// lane serves them one after the other (0-20, 20-40, 40-60 us), rank 1's runs alongside (0-10 us).
// An Unpack into staging (the root's gather) loads nothing.
TransferPlan BaselineUnpacks() {
  TransferPlan plan;
  plan.strategy = "gather-broadcast";
  plan.num_ranks = 2;
  plan.destination_buffers = BufferTable({BufferSpec{0, "d0", 1024}, BufferSpec{1, "d1", 1024}});
  const int s0 = plan.AddSlot(0, 1024);
  const int s1 = plan.AddSlot(1, 1024);
  for (int b = 0; b < 3; ++b) AddUnpack(plan, 0, s0, 0, 2);
  AddUnpack(plan, 1, s1, 1, 1);
  AddUnpack(plan, 1, s1, 1, 3, /*to_staging=*/true);
  return plan;
}

TEST(CpuLanesTest, BaselineUnpacksWaitForTheirRanksWeightLoadingLane) {
  ClusterSpec c = LaneCluster();
  c.tensor_load_overhead = 10e-6;
  std::vector<OpTime> t = OpTimes(BaselineUnpacks(), c);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_NEAR(t[0].end, 20e-6, 1e-12);
  EXPECT_NEAR(t[1].end, 40e-6, 1e-12);
  EXPECT_NEAR(t[2].end, 60e-6, 1e-12);
  EXPECT_NEAR(t[3].end, 10e-6, 1e-12);
  EXPECT_NEAR(t[4].end, 0, 1e-12);
  // Twice the overhead, twice the times.
  c.tensor_load_overhead = 20e-6;
  EXPECT_NEAR(OpTimes(BaselineUnpacks(), c)[2].end, 120e-6, 1e-12);
}

TEST(CpuLanesTest, TheReshardLoadsNoTensors) {
  ClusterSpec c = LaneCluster();
  c.tensor_load_overhead = 10e-6;
  TransferPlan plan = BaselineUnpacks();
  plan.strategy = "reshard";
  for (const OpTime& t : OpTimes(plan, c)) EXPECT_NEAR(t.end, 0, 1e-12);
}

// Rank 0 has two copies (ops 0, 1) and then sends 1 MB to rank 2 (ops 2, 3), all ready at 0,
// at 10 us a post: the copies leave the lane at 10 and 20 us, the send (posted when its window
// slot is granted, after the ready local ops) at 30 us; rank 2's receive was posted at 10 us. The
// message starts at 30 us and takes 1 ms. Rank 2's own copy (op 4) waits behind its receive: 20 us.
TransferPlan CopiesThenASend() {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 4;
  Op copy;
  copy.kind = OpKind::kCopy;
  plan.AddOp(copy);
  plan.AddOp(copy);
  Op send;
  send.kind = OpKind::kSend;
  send.rank = 0;
  send.peer = 2;
  send.message = 0;
  send.bytes = 1'000'000;
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 2;
  recv.peer = 0;
  plan.AddOp(send);
  plan.AddOp(recv);
  copy.rank = 2;
  copy.round = 1;
  plan.AddOp(copy);
  return plan;
}

TEST(CpuLanesTest, EveryOpWaitsForItsRanksPostingLane) {
  ClusterSpec c = LaneCluster();
  c.op_post_overhead = 10e-6;
  std::vector<OpTime> t = OpTimes(CopiesThenASend(), c);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_NEAR(t[0].end, 10e-6, 1e-12);
  EXPECT_NEAR(t[1].end, 20e-6, 1e-12);
  EXPECT_NEAR(t[2].start, 30e-6, 1e-12);
  EXPECT_NEAR(t[3].end, 30e-6 + 1e-3, 1e-12);
  EXPECT_NEAR(t[4].end, 20e-6, 1e-12);
  // The overhead moves the prediction: 5 us a post, the send starts at 15 us.
  c.op_post_overhead = 5e-6;
  EXPECT_NEAR(OpTimes(CopiesThenASend(), c)[3].end, 15e-6 + 1e-3, 1e-12);
  // Without the lane everything starts at 0.
  c.op_post_overhead = 0;
  EXPECT_NEAR(OpTimes(CopiesThenASend(), c)[3].end, 1e-3, 1e-12);
}

// The receives ready at the start are posted in (round, id) order, whatever their rounds: here
// one is negative and they span more than 65,536 values (in one radix pass of the round's low 16
// bits, 65536 would go second), and two share a round and go in id order.
TEST(CpuLanesTest, ReceivesReadyAtTheStartArePostedInRoundThenIdOrder) {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 6;
  const int rounds[] = {65536, -3, 5, 5};
  const int senders[] = {0, 2, 3, 4};
  std::vector<int> recvs;
  for (int m = 0; m < 4; ++m) {
    Op send;
    send.kind = OpKind::kSend;
    send.rank = senders[m];
    send.peer = 1;
    send.message = m;
    send.bytes = 1000;
    send.round = rounds[m];
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.rank = 1;
    recv.peer = senders[m];
    plan.AddOp(send);
    recvs.push_back(plan.AddOp(recv));
  }
  ClusterSpec c = LaneCluster();
  c.op_post_overhead = 10e-6;
  std::vector<OpTime> t = OpTimes(plan, c);
  ASSERT_EQ(t.size(), 8u);
  EXPECT_NEAR(t[static_cast<size_t>(recvs[1])].ready, 10e-6, 1e-12);  // round -3
  EXPECT_NEAR(t[static_cast<size_t>(recvs[2])].ready, 20e-6, 1e-12);  // round 5, the lower id
  EXPECT_NEAR(t[static_cast<size_t>(recvs[3])].ready, 30e-6, 1e-12);  // round 5
  EXPECT_NEAR(t[static_cast<size_t>(recvs[0])].ready, 40e-6, 1e-12);  // round 65536
}

// Ranks 0 and 2 each receive from the other before they send to it. With a posting lane, every
// window still completes: 1 MB at 1 GB/s after the receive (10 us) and the send (20 us) are
// posted on each rank.
TEST(CpuLanesTest, NoWindowDeadlocksWithAPostingLane) {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 4;
  for (int m = 0; m < 2; ++m) {
    Op send;
    send.kind = OpKind::kSend;
    send.rank = m == 0 ? 0 : 2;
    send.peer = m == 0 ? 2 : 0;
    send.message = m;
    send.bytes = 1'000'000;
    send.round = 1;
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.rank = send.peer;
    recv.peer = send.rank;
    recv.round = 0;
    plan.AddOp(send);
    plan.AddOp(recv);
  }
  ClusterSpec c = LaneCluster();
  c.op_post_overhead = 10e-6;
  for (int window : {1, 2, 0}) {
    SimOptions options;
    options.max_in_flight = window;
    options.record_op_times = true;
    Result<SimResult> r = Simulate(plan, c, RankMapping::Identity(4), options);
    ASSERT_TRUE(r.ok()) << "window " << window << ": " << r.status().ToString();
    EXPECT_NEAR(r->total_time, 20e-6 + 1e-3, 1e-9) << "window " << window;
  }
}

// Rank 0 sends 1 MB to each of ranks 2, 4 and 6 (three other nodes) through its one 1 GB/s NIC,
// posted at 10, 20 and 30 us. The batch window widens to four posts (40 us), so the three starts
// take one rate recomputation, not three (with the 1 us window: three), and the first two flows
// wait for their first rate until the third starts, 20 us late at most: the NIC idles until 30 us
// and the three share it to the end, 30 us + 3 ms (3.01 ms with a rate at every start).
TEST(CpuLanesTest, StartsTheLaneSpreadsShareOneRateRecomputation) {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 8;
  for (int peer : {2, 4, 6}) {
    Op send;
    send.kind = OpKind::kSend;
    send.rank = 0;
    send.peer = peer;
    send.message = peer;
    send.bytes = 1'000'000;
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.rank = peer;
    recv.peer = 0;
    plan.AddOp(send);
    plan.AddOp(recv);
  }
  ClusterSpec c = LaneCluster();
  c.op_post_overhead = 10e-6;
  SimOptions options;
  options.record_op_times = true;
  options.max_in_flight = 0;
  Result<SimResult> r = Simulate(plan, c, RankMapping::Identity(8), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_recomputations, 1);
  for (int op : {0, 2, 4}) {
    EXPECT_NEAR(r->op_times[op].start, 10e-6 * (op / 2 + 1), 1e-12);
    EXPECT_NEAR(r->op_times[op].end, 30e-6 + 3e-3, 1e-12);
  }
}

TEST(CpuLanesTest, ClusterFilesSetTheLanesWithUnits) {
  Result<ClusterSpec> c = ParseClusterYaml("op_post_overhead: 3us\ntensor_load_overhead: 30us\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->op_post_overhead, 3e-6);
  EXPECT_DOUBLE_EQ(c->tensor_load_overhead, 30e-6);
  Result<ClusterSpec> preset = ClusterPreset("dgx-h100");
  ASSERT_TRUE(preset.ok());
  EXPECT_GT(preset->op_post_overhead, 0);
  EXPECT_GT(preset->tensor_load_overhead, 0);
  ClusterSpec bad = LaneCluster();
  bad.tensor_load_overhead = -1;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace ferry::sim
