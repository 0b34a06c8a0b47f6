// Planner tests: thousands of random layout pairs planned with both strategies, validated, then
// executed element by element against the oracle; determinism (and the streamed JSON export equal
// to a JSON library's text for those plans); hierarchical routing counts each destination node's
// bytes once; source replicas share the load; bad inputs are rejected.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/layout/tensor_stack.h"
#include "core/plan/export.h"
#include "core/plan/staging_layout.h"
#include "core/plan/stats.h"
#include "core/plan/validate.h"
#include "tests/planner/plan_sim_testutil.h"

namespace ferry {
namespace {

TEST(PlannerProperty, RandomLayoutsExecuteExactly) {
  const uint64_t seed = testing::PropertySeed(20240611);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int planned = 0;
  for (int i = 0; i < 2500; ++i) {
    testing::RandomCase c = testing::MakeRandomCase(rng);
    for (Strategy strategy : {Strategy::kReshard, Strategy::kGatherBroadcast}) {
      Result<PlanResult> r = MakePlan(strategy, c.source, c.destination, c.topology, c.options);
      ASSERT_TRUE(r.ok()) << "case " << i << ": " << r.status().ToString();
      Status valid = ValidatePlan(r->plan, c.source, c.destination);
      ASSERT_TRUE(valid.ok()) << "case " << i << " " << StrategyName(strategy) << ": "
                              << valid.ToString();
      Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
      ASSERT_TRUE(exec.ok()) << "case " << i << " " << StrategyName(strategy) << ": "
                             << exec.ToString();
      ++planned;
    }
  }
  EXPECT_EQ(planned, 5000);
}

// Stack folding (planner/fold_stacks.h) changes which tensors the planner sees, never what the
// plan does: plans of folded layouts must execute exactly against the original layouts.
TEST(PlannerProperty, StackedLayoutsExecuteExactly) {
  const uint64_t seed = testing::PropertySeed(20261129);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int folded = 0;
  for (int i = 0; i < 1500; ++i) {
    testing::RandomCase c = testing::MakeRandomStackedCase(rng);
    Result<PlanResult> r = PlanReshard(c.source, c.destination, c.topology, c.options);
    ASSERT_TRUE(r.ok()) << "case " << i << ": " << r.status().ToString();
    Status valid = ValidatePlan(r->plan, c.source, c.destination);
    ASSERT_TRUE(valid.ok()) << "case " << i << ": " << valid.ToString();
    Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
    ASSERT_TRUE(exec.ok()) << "case " << i << " (" << r->stacks << " stacks): " << exec.ToString();
    folded += r->stacks > 0;
    // Folding keeps planning deterministic: a second plan is byte-identical.
    if (i % 10 == 0) {
      Result<PlanResult> again = PlanReshard(c.source, c.destination, c.topology, c.options);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(PlanToJson(again->plan), PlanToJson(r->plan)) << "case " << i;
    }
  }
  // The generator makes most cases foldable; the test is void if none folds.
  EXPECT_GT(folded, 750);
}

// Tensor stacks (core/layout/tensor_stack.h) named alike on both sides are planned as they are;
// a family named as a stack on one side and member by member on the other is planned on both
// layouts expanded into members. Either way the plan must execute exactly against the layouts as
// given, where the oracle reads a stack's elements as its members'.
TEST(PlannerProperty, TensorStacksExecuteExactly) {
  const uint64_t seed = testing::PropertySeed(20261130);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int alike = 0, mixed = 0;
  for (int i = 0; i < 1000; ++i) {
    testing::RandomCase c = testing::MakeRandomStackedCase(rng, /*name_stacks=*/true);
    const bool agree = TensorStacksAgree(c.source, c.destination);
    bool any_stack = false;
    for (const TensorSpec& t : c.destination.tensors) {
      any_stack |= ParseTensorStackName(t.name).has_value();
    }
    alike += agree && any_stack;
    mixed += !agree;
    for (Strategy strategy : {Strategy::kReshard, Strategy::kGatherBroadcast}) {
      if (strategy == Strategy::kGatherBroadcast && i % 10 != 0) continue;
      Result<PlanResult> r = MakePlan(strategy, c.source, c.destination, c.topology, c.options);
      ASSERT_TRUE(r.ok()) << "case " << i << ": " << r.status().ToString();
      Status valid = ValidatePlan(r->plan, c.source, c.destination);
      ASSERT_TRUE(valid.ok()) << "case " << i << ": " << valid.ToString();
      Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
      ASSERT_TRUE(exec.ok()) << "case " << i << " " << StrategyName(strategy) << ": "
                             << exec.ToString();
    }
  }
  // Both paths are exercised, or the test is void.
  EXPECT_GT(alike, 100);
  EXPECT_GT(mixed, 200);
}

// Where a source holds a tensor stack one member per fragment (a trainer with a buffer per expert),
// each piece is a slice of one member, and its copy pairs are the member's 2-dim blocks, not 3-dim
// slices of the stack: the geometry most pairs share. Two members per fragment copy as 3 dims.
TEST(PlannerProperty, SlicesOfOneStackMemberCopyAsTheMembersBlocks) {
  for (int per_fragment : {1, 2}) {
    SCOPED_TRACE(std::to_string(per_fragment) + " members per source fragment");
    const TensorSpec stack{"layers.0.experts.[0:4].w", {4, 2, 3}, DType::kBF16};
    Layout src, dst;
    const int s = src.AddTensor(stack).value();
    for (int e = 0; e < 4; e += per_fragment) {
      src.PlaceFragment(s, *Box::Make({e, 0, 0}, {e + per_fragment, 2, 3}), 0,
                        "fc1." + std::to_string(e), 0, {6, 3, 1});
    }
    const int d = dst.AddTensor(stack).value();
    for (int rank : {1, 2}) {
      for (int half = 0; half < 2; ++half) {  // the rows split over two buffers, four experts each
        dst.PlaceFragment(d, *Box::Make({0, half, 0}, {4, half + 1, 3}), rank,
                          "w13." + std::to_string(half), 0, {3, 3, 1});
      }
    }
    for (int extra = 0; extra < 6; ++extra) {  // more destination fragments than source ones
      const int t = dst.AddTensor({"n" + std::to_string(extra), {1}, DType::kBF16}).value();
      const int u = src.AddTensor({"n" + std::to_string(extra), {1}, DType::kBF16}).value();
      src.AppendFragment(u, Box::FromShape({1}), 0, "n");
      dst.AppendFragment(t, Box::FromShape({1}), 1, "n");
      dst.AppendFragment(t, Box::FromShape({1}), 2, "n");
    }
    const Topology topology = Topology::Uniform(3, 1);
    Result<PlanResult> r = PlanReshard(src, dst, topology);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
    Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
    EXPECT_TRUE(exec.ok()) << exec.ToString();
    std::set<int> stack_pair_dims;
    for (size_t i = 0; i < r->plan.copies.size(); ++i) {
      const int ndim = r->plan.GeometryOf(static_cast<int>(i)).from_ndim;
      if (ndim > 1) stack_pair_dims.insert(ndim);
    }
    EXPECT_EQ(stack_pair_dims, (std::set<int>{per_fragment == 1 ? 2 : 3}));
  }
}

// Layouts that name one family with other ranges ([0:4] against [0:2] and [2:4]) agree neither as
// they are nor after stacking members: both are expanded into members, and the plan executes.
TEST(PlannerProperty, StacksOfOtherRangesArePlannedAsMembers) {
  Layout src, dst;
  const int s = src.AddTensor({"e.[0:4].w", {4, 2, 3}, DType::kBF16}).value();
  src.PlaceFragment(s, *Box::Make({0, 0, 0}, {4, 2, 3}), 0, "w", 0, {6, 3, 1});
  const int lo = dst.AddTensor({"e.[0:2].w", {2, 2, 3}, DType::kBF16}).value();
  const int hi = dst.AddTensor({"e.[2:4].w", {2, 2, 3}, DType::kBF16}).value();
  dst.PlaceFragment(lo, *Box::Make({0, 0, 0}, {2, 2, 3}), 1, "a", 0, {6, 3, 1});
  dst.PlaceFragment(hi, *Box::Make({0, 0, 0}, {2, 2, 3}), 1, "b", 0, {6, 3, 1});
  EXPECT_FALSE(TensorStacksAgree(src, dst));
  const Topology topology = Topology::Uniform(2, 1);
  for (Strategy strategy : {Strategy::kReshard, Strategy::kGatherBroadcast}) {
    Result<PlanResult> r = MakePlan(strategy, src, dst, topology);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
    Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
    EXPECT_TRUE(exec.ok()) << StrategyName(strategy) << ": " << exec.ToString();
  }
}

TEST(PlannerDeterminism, TwoRunsGiveIdenticalJson) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) {
    testing::RandomCase c = testing::MakeRandomCase(rng);
    for (Strategy strategy : {Strategy::kReshard, Strategy::kGatherBroadcast}) {
      Result<PlanResult> a = MakePlan(strategy, c.source, c.destination, c.topology, c.options);
      Result<PlanResult> b = MakePlan(strategy, c.source, c.destination, c.topology, c.options);
      ASSERT_TRUE(a.ok() && b.ok());
      const std::string json = PlanToJson(a->plan);
      EXPECT_EQ(json, PlanToJson(b->plan));
      EXPECT_EQ(PlanToDot(a->plan), PlanToDot(b->plan));
      // The streamed export writes what a JSON library would, indented too.
      EXPECT_EQ(PlanToJson(a->plan, 2), nlohmann::ordered_json::parse(json).dump(2));
    }
  }
}

// Source: `dp` replicas of a TP-`tp` column-parallel model on nodes of 8; destination: TP-8 row
// parallel replicated on `dst_nodes` nodes after the source nodes, plus replicated norms.
struct Preset {
  Layout source, destination;
  Topology topology;
};
Preset MakeReplicatedPreset(int layers, int tp, int dp, int dst_tp, int dst_dp) {
  Preset p;
  const int src_ranks = tp * dp;
  const int dst_ranks = dst_tp * dst_dp;
  p.topology = Topology::Uniform(src_ranks + dst_ranks, 8);
  for (int l = 0; l < layers; ++l) {
    TensorSpec w{"layers." + std::to_string(l) + ".mlp.weight", {4096, 1024}, DType::kBF16};
    TensorSpec n{"layers." + std::to_string(l) + ".norm.weight", {4096}, DType::kBF16};
    int ws = p.source.AddTensor(w).value();
    int ns = p.source.AddTensor(n).value();
    int wd = p.destination.AddTensor(w).value();
    int nd = p.destination.AddTensor(n).value();
    for (int r = 0; r < dp; ++r) {
      for (int t = 0; t < tp; ++t) {
        const int rank = r * tp + t;
        p.source.AppendFragment(ws, Box::Make({4096 / tp * t, 0}, {4096 / tp * (t + 1), 1024}).value(), rank, "w");
        p.source.AppendFragment(ns, Box::FromShape({4096}), rank, "n");
      }
    }
    for (int r = 0; r < dst_dp; ++r) {
      for (int t = 0; t < dst_tp; ++t) {
        const int rank = src_ranks + r * dst_tp + t;
        p.destination.AppendFragment(wd, Box::Make({0, 1024 / dst_tp * t}, {4096, 1024 / dst_tp * (t + 1)}).value(), rank, "w");
        p.destination.AppendFragment(nd, Box::FromShape({4096}), rank, "n");
      }
    }
  }
  return p;
}

TEST(PlannerRouting, InterNodeBytesIntoEachNodeCountedOnce) {
  for (RelayMode relay : {RelayMode::kOff, RelayMode::kOn, RelayMode::kAuto}) {
    Preset p = MakeReplicatedPreset(6, 8, 2, 8, 3);
    PlannerOptions options;
    options.relay = relay;
    options.network_chunk_bytes = 1 << 20;
    options.fanout_chunk_bytes = 256 << 10;
    options.relay_chunk_bytes = 128 << 10;
    Result<PlanResult> r = PlanReshard(p.source, p.destination, p.topology, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, p.source, p.destination).ok());
    PlanStats stats = ComputePlanStats(r->plan, p.topology, &r->demand);
    // Each destination node needs the whole model (its 8 GPUs hold one TP-8 replica), once.
    const int64_t model = p.destination.LogicalBytes();
    for (int node = 2; node < 5; ++node) {
      EXPECT_EQ(r->demand.destination_node_bytes[node], model);
      EXPECT_EQ(stats.node_network_ingress[node], model) << "node " << node;
    }
    // Norms are needed by all 8 GPUs of a node: they fan out inside the node.
    EXPECT_GT(stats.bytes_by_link[static_cast<int>(LinkClass::kSameNode)], 0);
    EXPECT_GT(stats.lower_bound.seconds, 0);
    EXPECT_GE(stats.predicted_seconds, stats.lower_bound.seconds * 0.999);
  }
}

// The executor posts a rank's sends in (round, id) order with at most executor.max_in_flight in
// the air, so each rank's network sends cycle through the destination nodes: any run of as many
// sends as the rank has destination nodes reaches every one of them.
TEST(PlannerOrder, EachRanksSendsCycleThroughDestinationNodes) {
  Preset p = MakeReplicatedPreset(6, 8, 1, 8, 3);  // source node 0, destination nodes 1 to 3
  PlannerOptions options;
  options.relay = RelayMode::kOff;
  options.network_chunk_bytes = 64 << 10;  // 8 to 24 messages per (rank, node)
  Result<PlanResult> r = PlanReshard(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<int, std::vector<const Op*>> sends;  // by rank
  for (const Op& op : r->plan.ops) {
    if (op.kind == OpKind::kSend && op.link == LinkClass::kNetwork) sends[op.rank].push_back(&op);
  }
  ASSERT_EQ(sends.size(), 8u);
  for (auto& [rank, ops] : sends) {
    std::sort(ops.begin(), ops.end(), [](const Op* a, const Op* b) {
      return std::pair(a->round, a->id) < std::pair(b->round, b->id);
    });
    ASSERT_GE(ops.size(), 3u * 8);
    for (size_t i = 0; i + 3 <= 3 * 8; ++i) {
      std::set<int> nodes;
      for (size_t k = i; k < i + 3; ++k) nodes.insert(p.topology.NodeOf(ops[k]->peer));
      EXPECT_EQ(nodes.size(), 3u) << "rank " << rank << ", sends " << i << " to " << i + 2;
    }
  }
}

// Where every sender sends to every rank of each destination node (row shards to column shards,
// as Megatron's whole experts to vLLM's TP-sharded ones), a sender's sends to one node take its
// receiving ranks in turn, starting at a different rank per sender: any run of as many sends as
// there are receiving ranks reaches each of them (and so each of their NICs), and the senders'
// first sends to a node land on distinct ranks.
TEST(PlannerOrder, SendsToOneNodeCycleThroughItsReceivingRanks) {
  constexpr int kRows = 64, kCols = 64, kTensors = 4, kDstNodes = 2;
  const Topology topology = Topology::Uniform(8 * (1 + kDstNodes), 8);
  Layout src, dst;
  for (int t = 0; t < kTensors; ++t) {
    const TensorSpec spec{"w" + std::to_string(t), {kRows, kCols}, DType::kFP32};
    const int s = src.AddTensor(spec).value();
    const int d = dst.AddTensor(spec).value();
    for (int rank = 0; rank < 8; ++rank) {
      src.AppendFragment(s, Box::Make({8 * rank, 0}, {8 * rank + 8, kCols}).value(), rank, "w");
    }
    for (int rank = 8; rank < 8 * (1 + kDstNodes); ++rank) {
      const int64_t col = 8 * (rank % 8);
      dst.AppendFragment(d, Box::Make({0, col}, {kRows, col + 8}).value(), rank, "w");
    }
  }
  PlannerOptions options;
  options.relay = RelayMode::kOff;
  options.network_chunk_bytes = 512;  // 2 tensors' pieces of 256 bytes: 2 messages per (sender, rank)
  Result<PlanResult> r = PlanReshard(src, dst, topology, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
  std::map<int, std::vector<const Op*>> sends;  // by rank
  for (const Op& op : r->plan.ops) {
    if (op.kind == OpKind::kSend && op.link == LinkClass::kNetwork) sends[op.rank].push_back(&op);
  }
  ASSERT_EQ(sends.size(), 8u);
  const size_t receivers = 8 * kDstNodes;
  std::map<int, std::set<int>> first_receivers;  // node -> the senders' first receiving ranks
  for (auto& [rank, ops] : sends) {
    std::sort(ops.begin(), ops.end(), [](const Op* a, const Op* b) {
      return std::pair(a->round, a->id) < std::pair(b->round, b->id);
    });
    ASSERT_EQ(ops.size(), 2 * receivers) << "rank " << rank;
    for (size_t i = 0; i + receivers <= ops.size(); i += receivers) {
      std::set<int> peers;
      for (size_t k = i; k < i + receivers; ++k) peers.insert(ops[k]->peer);
      EXPECT_EQ(peers.size(), receivers) << "rank " << rank << ", sends " << i << " on";
    }
    std::set<int> nodes_seen;
    for (const Op* op : ops) {
      const int node = topology.NodeOf(op->peer);
      if (nodes_seen.insert(node).second) first_receivers[node].insert(op->peer);
    }
  }
  for (const auto& [node, ranks] : first_receivers) EXPECT_EQ(ranks.size(), 8u) << "node " << node;
  Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
  EXPECT_TRUE(exec.ok()) << exec.ToString();
}

// A chain inside one node is cut at fanout_chunk_bytes and a chain relayed between nodes' leaders
// at relay_chunk_bytes (its hops cross the network), not at network_chunk_bytes (the whole tensor).
TEST(PlannerRouting, FanOutAndRelayedChainsHaveTheirOwnChunkSizes) {
  Layout src, dst;
  const TensorSpec spec{"w", {64, 64}, DType::kFP32};  // 16 KiB
  src.AppendFragment(src.AddTensor(spec).value(), Box::FromShape({64, 64}), 0, "w");
  const int t = dst.AddTensor(spec).value();
  for (int rank = 4; rank < 12; ++rank) dst.AppendFragment(t, Box::FromShape({64, 64}), rank, "w");
  const Topology topology = Topology::Uniform(12, 4);  // the replicas on nodes 1 and 2
  for (RelayMode relay : {RelayMode::kOff, RelayMode::kOn}) {
    PlannerOptions options;
    options.relay = relay;
    options.network_chunk_bytes = 16 << 10;
    options.fanout_chunk_bytes = 4 << 10;
    options.relay_chunk_bytes = 1 << 10;
    Result<PlanResult> r = PlanReshard(src, dst, topology, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
    Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
    EXPECT_TRUE(exec.ok()) << exec.ToString();
    const int64_t chunk = relay == RelayMode::kOn ? 1 << 10 : 4 << 10;
    int sends = 0, forwards = 0, network_forwards = 0;
    for (const Op& op : r->plan.ops) {
      if (op.kind != OpKind::kSend && op.kind != OpKind::kForward) continue;
      EXPECT_EQ(op.bytes, chunk) << OpKindName(op.kind) << " on rank " << op.rank;
      (op.kind == OpKind::kSend ? sends : forwards) += 1;
      if (op.kind == OpKind::kForward && op.link == LinkClass::kNetwork) ++network_forwards;
    }
    const int chunks = static_cast<int>((16 << 10) / chunk);
    if (relay == RelayMode::kOn) {
      // One chain through both nodes: each chunk sent once, then forwarded to 7 ranks, one of
      // them the next node's leader.
      EXPECT_EQ(sends, chunks);
      EXPECT_EQ(forwards, 7 * chunks);
      EXPECT_EQ(network_forwards, chunks);
    } else {
      // A chain per node: each chunk sent to both leaders, each forwarding it to 3 ranks.
      EXPECT_EQ(sends, 2 * chunks);
      EXPECT_EQ(forwards, 6 * chunks);
      EXPECT_EQ(network_forwards, 0);
    }
  }
}

// A message from a holder to a destination rank of its node is cut at same_node_chunk_bytes, a
// message to another node at network_chunk_bytes.
TEST(PlannerRouting, SameNodeMessagesHaveTheirOwnChunkSize) {
  Layout src, dst;
  const TensorSpec spec{"w", {64, 64}, DType::kFP32};  // 16 KiB
  src.AppendFragment(src.AddTensor(spec).value(), Box::FromShape({64, 64}), 0, "w");
  const int t = dst.AddTensor(spec).value();
  dst.AppendFragment(t, Box::FromShape({64, 64}), 1, "w");  // rank 1: node 0, as rank 0
  dst.AppendFragment(t, Box::FromShape({64, 64}), 2, "w");  // rank 2: node 1
  PlannerOptions options;
  options.network_chunk_bytes = 2 << 10;
  options.same_node_chunk_bytes = 8 << 10;
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(4, 2), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
  EXPECT_TRUE(exec.ok()) << exec.ToString();
  std::map<int, std::vector<int64_t>> sent;  // by receiving rank
  for (const Op& op : r->plan.ops) {
    if (op.kind == OpKind::kSend) sent[op.peer].push_back(op.bytes);
  }
  EXPECT_EQ(sent[1], std::vector<int64_t>(2, 8 << 10));
  EXPECT_EQ(sent[2], std::vector<int64_t>(8, 2 << 10));
}

// Small deliveries (a tensor of 64 rows, one fragment per row) are packed into messages up to the
// same chunk sizes: 8 rows a message to the rank of the holder's node, 2 to the other node.
TEST(PlannerRouting, SameNodeMessagesArePackedToTheirOwnChunkSize) {
  Layout src, dst;
  const TensorSpec spec{"w", {64, 256}, DType::kFP32};  // 1 KiB rows
  const int s = src.AddTensor(spec).value();
  const int t = dst.AddTensor(spec).value();
  for (int64_t row = 0; row < 64; ++row) {
    const Box box = Box::Make({row, 0}, {row + 1, 256}).value();
    src.AppendFragment(s, box, 0, "w" + std::to_string(row));
    dst.AppendFragment(t, box, 1, "w");
    dst.AppendFragment(t, box, 2, "w");
  }
  PlannerOptions options;
  options.network_chunk_bytes = 2 << 10;
  options.same_node_chunk_bytes = 8 << 10;
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(4, 2), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
  EXPECT_TRUE(exec.ok()) << exec.ToString();
  std::map<int, std::vector<int64_t>> sent;  // by receiving rank
  for (const Op& op : r->plan.ops) {
    if (op.kind == OpKind::kSend) sent[op.peer].push_back(op.bytes);
  }
  EXPECT_EQ(sent[1], std::vector<int64_t>(8, 8 << 10));
  EXPECT_EQ(sent[2], std::vector<int64_t>(32, 2 << 10));
}

// A rank may hold the same box twice (two buffers): every copy is written, whether the rank gets
// the bytes straight from a holder on its node, as a member of a node's fan-out tree, or as a
// tree of its own. Such ranks are the members whose fragments emission looks up in the group.
TEST(PlannerRouting, ARankHoldingABoxTwiceGetsEveryCopy) {
  Layout src, dst;
  const TensorSpec spec{"w", {16, 8}, DType::kFP32};
  src.AppendFragment(src.AddTensor(spec).value(), Box::FromShape({16, 8}), 0, "w");
  const int t = dst.AddTensor(spec).value();
  for (int rank : {1, 2, 3, 4}) {
    dst.AppendFragment(t, Box::FromShape({16, 8}), rank, "w");
    if (rank != 3) dst.AppendFragment(t, Box::FromShape({16, 8}), rank, "w.copy");
  }
  const Topology topology = Topology::Uniform(6, 2);  // source node 0; ranks 2, 3 share node 1
  for (bool hierarchical : {true, false}) {
    PlannerOptions options;
    options.hierarchical = hierarchical;
    Result<PlanResult> r = PlanReshard(src, dst, topology, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
    Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
    EXPECT_TRUE(exec.ok()) << exec.ToString();
    // Each rank unpacks its copies from one staging slot: two pairs on ranks 1, 2 and 4.
    std::map<int, int> unpack_pairs;
    for (const Op& op : r->plan.ops) {
      if (op.kind == OpKind::kUnpack) unpack_pairs[op.rank] += op.NumCopies();
    }
    EXPECT_EQ(unpack_pairs[1], 2);
    EXPECT_EQ(unpack_pairs[2], 2);
    EXPECT_EQ(unpack_pairs[4], 2);
  }
}

// planner.same_rank=transport: bytes a rank holds for itself become messages to itself, so random
// layouts still execute exactly, with no Copy op left; and every message's Send (or Forward) and
// Recv share a round, which grouped transports (NCCL) rely on.
TEST(PlannerSameRank, TransportModeSendsToItselfAndExecutesExactly) {
  const uint64_t seed = testing::PropertySeed(20261202);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int self_messages = 0;
  for (int i = 0; i < 500; ++i) {
    testing::RandomCase c = testing::MakeRandomCase(rng);
    c.options.same_rank = SameRankMode::kTransport;
    Result<PlanResult> r = PlanReshard(c.source, c.destination, c.topology, c.options);
    ASSERT_TRUE(r.ok()) << "case " << i << ": " << r.status().ToString();
    ASSERT_TRUE(ValidatePlan(r->plan, c.source, c.destination).ok()) << "case " << i;
    Status exec = testing::ExecuteAndCheck(r->plan, c.source, c.destination);
    ASSERT_TRUE(exec.ok()) << "case " << i << ": " << exec.ToString();
    std::map<int64_t, int> round_of_send;
    for (const Op& op : r->plan.ops) {
      ASSERT_NE(op.kind, OpKind::kCopy) << "case " << i;
      if (op.kind == OpKind::kSend || op.kind == OpKind::kForward) round_of_send[op.message] = op.round;
      self_messages += op.kind == OpKind::kSend && op.peer == op.rank;
    }
    for (const Op& op : r->plan.ops) {
      if (op.kind != OpKind::kRecv) continue;
      EXPECT_EQ(op.round, round_of_send.at(op.message)) << "case " << i;
    }
  }
  EXPECT_GT(self_messages, 0);
}

// One rank holding a tensor in rows and wanting it in columns: by default one Copy op; with
// planner.same_rank=transport messages to itself, packed from the strided column blocks.
TEST(PlannerSameRank, OneRankTransposeBecomesMessagesToItself) {
  Layout src, dst;
  const TensorSpec spec{"w", {8, 8}, DType::kFP32};
  const int s = src.AddTensor(spec).value();
  src.AppendFragment(s, Box::FromShape({8, 8}), 0, "src");
  const int d = dst.AddTensor(spec).value();
  dst.AppendFragment(d, Box::Make({0, 0}, {8, 4}).value(), 0, "left");
  dst.AppendFragment(d, Box::Make({0, 4}, {8, 8}).value(), 0, "right");
  const Topology topology = Topology::Uniform(1, 1);
  PlannerOptions options;
  Result<PlanResult> copied = PlanReshard(src, dst, topology, options);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  std::map<OpKind, int> kinds;
  for (const Op& op : copied->plan.ops) ++kinds[op.kind];
  EXPECT_EQ(kinds, (std::map<OpKind, int>{{OpKind::kCopy, 1}}));

  options.same_rank = SameRankMode::kTransport;
  Result<PlanResult> sent = PlanReshard(src, dst, topology, options);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(ValidatePlan(sent->plan, src, dst).ok());
  EXPECT_TRUE(testing::ExecuteAndCheck(sent->plan, src, dst).ok());
  kinds.clear();
  for (const Op& op : sent->plan.ops) {
    ++kinds[op.kind];
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
      EXPECT_EQ(op.peer, 0);
      EXPECT_EQ(op.link, LinkClass::kSameRank);
    }
  }
  EXPECT_EQ(kinds[OpKind::kCopy], 0);
  EXPECT_GE(kinds[OpKind::kSend], 1);
  EXPECT_EQ(kinds[OpKind::kRecv], kinds[OpKind::kSend]);
  EXPECT_EQ(kinds[OpKind::kPack], kinds[OpKind::kSend]);  // column blocks are strided in the rows
}

// A replicated tensor fans out in a chain through the GPUs of a node. Each member's copy is one
// contiguous place, so every chunk lands there and is forwarded from there: no staging slot and no
// Unpack anywhere.
TEST(PlannerRouting, FanOutMembersReceiveInPlaceAndForwardFromThere) {
  Layout src, dst;
  const TensorSpec spec{"norm", {16, 8}, DType::kFP32};
  src.AppendFragment(src.AddTensor(spec).value(), Box::FromShape({16, 8}), 0, "norm");
  const int t = dst.AddTensor(spec).value();
  for (int rank : {4, 5, 6, 7}) dst.AppendFragment(t, Box::FromShape({16, 8}), rank, "norm");
  const Topology topology = Topology::Uniform(8, 4);  // source on node 0, the replicas on node 1
  PlannerOptions options;
  options.network_chunk_bytes = 128;
  options.fanout_chunk_bytes = 128;  // four chunks of the 512 bytes
  Result<PlanResult> r = PlanReshard(src, dst, topology, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ValidatePlan(r->plan, src, dst).ok());
  Status exec = testing::ExecuteAndCheck(r->plan, src, dst);
  EXPECT_TRUE(exec.ok()) << exec.ToString();
  EXPECT_TRUE(r->plan.slots.empty());
  int forwards = 0;
  for (const Op& op : r->plan.ops) {
    EXPECT_NE(op.kind, OpKind::kUnpack);
    if (op.kind != OpKind::kForward) continue;
    ++forwards;
    ASSERT_EQ(op.NumDeps(), 1);
    const Op& recv = r->plan.ops[r->plan.Deps(op)[0]];
    EXPECT_EQ(recv.kind, OpKind::kRecv);
    EXPECT_EQ(op.data.space, Space::kDestination);
    EXPECT_EQ(op.data.offset, recv.data.offset);
  }
  EXPECT_EQ(forwards, 3 * 4);  // three hops down the chain, per chunk
}

TEST(PlannerRouting, WithoutHierarchyReplicatedBytesCrossTwice) {
  Preset p = MakeReplicatedPreset(2, 8, 1, 8, 1);
  PlannerOptions options;
  options.hierarchical = false;
  Result<PlanResult> r = PlanReshard(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(r.ok());
  PlanStats stats = ComputePlanStats(r->plan, p.topology, &r->demand);
  EXPECT_GT(stats.node_network_ingress[1], r->demand.destination_node_bytes[1]);
}

TEST(PlannerBalance, SourceReplicasShareTheLoad) {
  // 4 DP replicas of TP-2 on source; destination TP-8 on other nodes: every byte has 4 holders.
  Preset p = MakeReplicatedPreset(16, 2, 4, 8, 2);
  PlannerOptions options;
  options.network_chunk_bytes = 1 << 20;
  Result<PlanResult> r = PlanReshard(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(r.ok());
  PlanStats stats = ComputePlanStats(r->plan, p.topology, &r->demand);
  int64_t total = 0, max = 0;
  for (int rank = 0; rank < 8; ++rank) {
    total += stats.rank_network_egress[rank];
    max = std::max(max, stats.rank_network_egress[rank]);
  }
  ASSERT_GT(total, 0);
  EXPECT_LE(static_cast<double>(max) / (static_cast<double>(total) / 8), 1.05);
}

TEST(PlannerBaseline, GatherBroadcastMovesTheModelToEveryRank) {
  Preset p = MakeReplicatedPreset(4, 8, 1, 8, 2);
  PlannerOptions options;
  options.bucket_bytes = 16 << 20;
  Result<PlanResult> gb = PlanGatherBroadcast(p.source, p.destination, p.topology, options);
  Result<PlanResult> rs = PlanReshard(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(gb.ok() && rs.ok());
  ASSERT_TRUE(ValidatePlan(gb->plan, p.source, p.destination).ok());
  PlanStats g = ComputePlanStats(gb->plan, p.topology, &gb->demand);
  PlanStats s = ComputePlanStats(rs->plan, p.topology, &rs->demand);
  const int64_t model = p.destination.LogicalBytes();
  const int64_t weights = 4 * int64_t{4096} * 1024 * 2;
  // The chain through 16 destination ranks carries the whole model 16 times; rank 0 gathers the
  // 7/8 of the weights it lacks (it holds the replicated norms); a chunk on another rail than
  // rank 0's first crosses to that rail's GPU of rank 0's node (one more hop at most).
  const int64_t moved = g.bytes_by_link[1] + g.bytes_by_link[2];
  EXPECT_GT(moved, model * 16 + weights / 8 * 7);
  EXPECT_LE(moved, model * 17 + weights / 8 * 7);
  EXPECT_GT(g.predicted_seconds, s.predicted_seconds);
}

TEST(PlannerBaseline, BroadcastIsPipelinedInChunksOverEveryRail) {
  Preset p = MakeReplicatedPreset(4, 8, 1, 8, 2);
  PlannerOptions options;
  options.bucket_bytes = 16 << 20;
  options.broadcast_chunk_bytes = 1 << 20;
  Result<PlanResult> gb = PlanGatherBroadcast(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(gb.ok());
  ASSERT_TRUE(ValidatePlan(gb->plan, p.source, p.destination).ok());
  ASSERT_TRUE(testing::ExecuteAndCheck(gb->plan, p.source, p.destination).ok());
  int forwards = 0;
  std::set<int> leader_rails;  // local GPUs that forward a chunk to another destination node
  for (const Op& op : gb->plan.ops) {
    if (op.kind != OpKind::kForward) continue;
    ++forwards;
    EXPECT_LE(op.bytes, options.broadcast_chunk_bytes);
    // A Forward relays a chunk it received: it depends on exactly that Recv.
    ASSERT_EQ(op.NumDeps(), 1);
    EXPECT_EQ(gb->plan.ops[gb->plan.Deps(op)[0]].kind, OpKind::kRecv);
    if (p.topology.Link(op.rank, op.peer) == LinkClass::kNetwork) {
      leader_rails.insert(p.topology.ranks[op.rank].local_device);
      EXPECT_EQ(p.topology.ranks[op.rank].local_device, p.topology.ranks[op.peer].local_device);
    }
  }
  EXPECT_GT(forwards, 0);
  EXPECT_EQ(leader_rails.size(), 8u);  // the node leader (and its rail) rotates per chunk

  options.broadcast_chunk_bytes = 0;
  EXPECT_FALSE(PlanGatherBroadcast(p.source, p.destination, p.topology, options).ok());
}

// NeMo RL's baseline: the bytes rank 0 lacks enter its node on every rail (the trainers'
// all-gathers), and NCCL's ring broadcast leaves the node through every GPU's NIC, not rank 0's.
TEST(PlannerBaseline, GatherAndBroadcastUseEveryRailOfTheRootsNode) {
  Preset p = MakeReplicatedPreset(4, 16, 1, 8, 2);  // sources on nodes 0-1, destinations 2-3
  PlannerOptions options;
  options.bucket_bytes = 16 << 20;
  options.broadcast_chunk_bytes = 1 << 20;
  Result<PlanResult> gb = PlanGatherBroadcast(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(gb.ok());
  ASSERT_TRUE(ValidatePlan(gb->plan, p.source, p.destination).ok());
  ASSERT_TRUE(testing::ExecuteAndCheck(gb->plan, p.source, p.destination).ok());
  std::set<int> in_rails, out_rails;  // local GPUs of node 0 that receive / send over the network
  int64_t root_network = 0, node0_network = 0;
  for (const Op& op : gb->plan.ops) {
    const bool sends = op.kind == OpKind::kSend || op.kind == OpKind::kForward;
    if (!sends || p.topology.Link(op.rank, op.peer) != LinkClass::kNetwork) continue;
    EXPECT_EQ(p.topology.ranks[op.rank].local_device, p.topology.ranks[op.peer].local_device);
    if (p.topology.ranks[op.peer].node == 0) in_rails.insert(p.topology.ranks[op.peer].local_device);
    if (p.topology.ranks[op.rank].node == 0) {
      out_rails.insert(p.topology.ranks[op.rank].local_device);
      node0_network += op.bytes;
      if (op.rank == 0) root_network += op.bytes;
    }
  }
  EXPECT_EQ(in_rails.size(), 8u);
  EXPECT_EQ(out_rails.size(), 8u);
  // Rank 0 sends only its own rail's share of the broadcast.
  EXPECT_LE(root_network, node0_network / 8 + (int64_t{1} << 20));
}

// NeMo RL cycles NRL_REFIT_NUM_BUFFERS (2) bucket buffers (nemo_rl/utils/packed_tensor.py: a
// buffer's previous broadcast is synchronised before it is filled again): rank 0 fills bucket b
// only after everything that reads its bucket b - 2 (the sends of its broadcast) is done. Six
// one-layer buckets: slots 0-5 are rank 0's bucket buffers.
TEST(PlannerBaseline, GatherBroadcastCyclesTwoBucketBuffersAsNemoRlDoes) {
  Preset p = MakeReplicatedPreset(6, 8, 1, 8, 2);
  PlannerOptions options;
  options.bucket_bytes = 9 << 20;
  options.broadcast_chunk_bytes = 2 << 20;
  Result<PlanResult> gb = PlanGatherBroadcast(p.source, p.destination, p.topology, options);
  ASSERT_TRUE(gb.ok()) << gb.status().ToString();
  ASSERT_TRUE(ValidatePlan(gb->plan, p.source, p.destination).ok());
  ASSERT_TRUE(testing::ExecuteAndCheck(gb->plan, p.source, p.destination).ok());
  const TransferPlan& plan = gb->plan;
  std::map<int, std::set<int>> ancestors;  // rank 0's ops, in id order
  std::map<int, std::vector<int>> writers, readers;  // bucket slot -> rank 0's ops filling / reading it
  for (const Op& op : plan.ops) {
    if (op.rank != 0) continue;
    std::set<int>& mine = ancestors[op.id];
    for (int d : plan.Deps(op)) {
      mine.insert(d);
      mine.insert(ancestors[d].begin(), ancestors[d].end());
    }
    for (const CopyPair& c : plan.Copies(op)) {
      if (c.to.space == Space::kStaging && c.to.buffer < 6) writers[c.to.buffer].push_back(op.id);
    }
    if (op.kind == OpKind::kSend && op.data.buffer < 6) readers[op.data.buffer].push_back(op.id);
  }
  ASSERT_EQ(writers.size(), 6u);
  for (int b = 2; b < 6; ++b) {
    ASSERT_FALSE(readers[b - 2].empty());
    for (int w : writers[b]) {
      for (int r : readers[b - 2]) EXPECT_TRUE(ancestors[w].count(r)) << "bucket " << b << ": op " << w << " before " << r;
    }
  }
  EXPECT_FALSE(ancestors[writers[1].front()].count(readers[0].front()));  // two buffers: no wait yet
  // The staging a run needs follows the buffers: with two, rank 0 holds two bucket buffers and
  // one bucket's gathered pieces, a destination rank two buckets; more without a bound.
  auto needed = [&](int buffers) {
    options.broadcast_buffers = buffers;
    Result<PlanResult> r = PlanGatherBroadcast(p.source, p.destination, p.topology, options);
    EXPECT_TRUE(r.ok());
    return r.ok() ? PlanOrderStagingBytes(r->plan).value() : 0;
  };
  const int64_t one = needed(1), two = needed(2), unbounded = needed(1000);
  EXPECT_LT(one, two);
  EXPECT_LE(two, 3 * options.bucket_bytes);
  EXPECT_LT(two, unbounded);
}

// The baseline cuts a destination's tensor stacks between members where buckets end (NeMo RL
// packs a layer's experts one by one) without unstacking the destination's fragments: its plan is
// the plan of the destination unstacked, op for op and pair for pair, at any bucket size, and its
// network demand is the reshard plan's of the same layouts.
TEST(PlannerBaseline, StackedDestinationsPlanAsTheirMembers) {
  const uint64_t seed = testing::PropertySeed(20261203);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int cut = 0;
  for (int i = 0; i < 300; ++i) {
    testing::RandomCase c = testing::MakeRandomStackedCase(rng, /*name_stacks=*/true);
    std::set<int> stack_ranks;  // destination ranks holding a stack's fragment
    for (const Fragment& f : c.destination.fragments) {
      if (ParseTensorStackName(c.destination.tensors[f.tensor].name)) stack_ranks.insert(f.loc.rank);
    }
    if (stack_ranks.empty()) continue;
    c.options.bucket_bytes = 1 + static_cast<int64_t>(rng() % 512);
    Result<Layout> members = UnstackTensors(c.destination);
    ASSERT_TRUE(members.ok()) << "case " << i << ": " << members.status().ToString();
    Result<PlanResult> kept = PlanGatherBroadcast(c.source, c.destination, c.topology, c.options);
    Result<PlanResult> expanded = PlanGatherBroadcast(c.source, *members, c.topology, c.options);
    ASSERT_TRUE(kept.ok()) << "case " << i << ": " << kept.status().ToString();
    ASSERT_TRUE(expanded.ok()) << "case " << i << ": " << expanded.status().ToString();
    ASSERT_EQ(PlanToJson(kept->plan), PlanToJson(expanded->plan)) << "case " << i;
    // The lower bound's demand is the reshard's of the same layouts.
    Result<PlanResult> reshard = PlanReshard(c.source, c.destination, c.topology, c.options);
    ASSERT_TRUE(reshard.ok()) << "case " << i << ": " << reshard.status().ToString();
    EXPECT_EQ(kept->demand.destination_node_bytes, reshard->demand.destination_node_bytes) << "case " << i;
    EXPECT_EQ(kept->demand.source_node_bytes, reshard->demand.source_node_bytes) << "case " << i;
    EXPECT_EQ(kept->demand.must_leave_bytes, reshard->demand.must_leave_bytes) << "case " << i;
    EXPECT_EQ(kept->demand.source_nodes, reshard->demand.source_nodes) << "case " << i;
    Status exec = testing::ExecuteAndCheck(kept->plan, c.source, c.destination);
    ASSERT_TRUE(exec.ok()) << "case " << i << ": " << exec.ToString();
    std::map<int, int> unpacks;  // by rank holding a stack
    for (const Op& op : kept->plan.ops) {
      if (op.kind == OpKind::kUnpack && stack_ranks.count(op.rank)) ++unpacks[op.rank];
    }
    for (const auto& [rank, n] : unpacks) cut += n > 1;
  }
  EXPECT_GT(cut, 50);  // ranks whose stacks more than one bucket fills, or the test is void
}

TEST(PlannerErrors, RejectsBadInput) {
  Layout src, dst;
  int a = src.AddTensor({"a", {8}, DType::kFP32}).value();
  src.AppendFragment(a, Box::Make({0}, {4}).value(), 0, "a");
  int b = dst.AddTensor({"a", {8}, DType::kFP32}).value();
  dst.AppendFragment(b, Box::FromShape({8}), 1, "a");
  Topology topo = Topology::Uniform(2, 1);
  Result<PlanResult> r = PlanReshard(src, dst, topo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not fully covered"), std::string::npos) << r.status().ToString();

  Layout dst2;
  int c = dst2.AddTensor({"a", {8}, DType::kInt32}).value();  // fp32 -> int32: not converted
  dst2.AppendFragment(c, Box::FromShape({8}), 1, "a");
  r = PlanReshard(src, dst2, topo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("int32"), std::string::npos);

  Layout dst3;
  int e = dst3.AddTensor({"missing", {8}, DType::kFP32}).value();
  dst3.AppendFragment(e, Box::FromShape({8}), 1, "m");
  EXPECT_FALSE(PlanReshard(src, dst3, topo).ok());

  EXPECT_FALSE(PlanReshard(src, dst, Topology::Uniform(1, 1)).ok());  // rank 1 unknown
}

}  // namespace
}  // namespace ferry
