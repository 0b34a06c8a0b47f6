// The executor with a grouped transport (capabilities().grouped, as NCCL's): "grouped_tcp", a tcp
// transport that says it is grouped and records how the executor posts on it. Three forked ranks
// run the three-rank plan with its rounds made consistent; every post must come between
// BeginGroup and EndGroup, one group per round the rank has ops in, even with an in-flight window
// of one op (a round is never split). Plans that cannot run round by round are refused up front.
#include <gtest/gtest.h>

#include <set>

#include "core/layout/layout.h"
#include "core/runtime/executor.h"
#include "planner/planner.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

// tcp, grouped: forwards every call to a real tcp transport and counts groups and stray posts.
class GroupedTcp final : public Transport {
 public:
  explicit GroupedTcp(std::unique_ptr<Transport> tcp) : tcp_(std::move(tcp)) {}
  std::string_view name() const override { return "grouped_tcp"; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities c = tcp_->capabilities();
    c.grouped = true;
    return c;
  }
  Result<Bytes> LocalEndpointInfo() override { return tcp_->LocalEndpointInfo(); }
  Status Connect(int peer, std::span<const uint8_t> info, Deadline deadline) override {
    return tcp_->Connect(peer, info, deadline);
  }
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& m) override { return tcp_->RegisterMemory(m); }
  Status DeregisterMemory(MemoryHandle m) override { return tcp_->DeregisterMemory(m); }
  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& b) override {
    Record();
    return tcp_->PostSend(peer, tag, b);
  }
  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& b) override {
    Record();
    return tcp_->PostRecv(peer, tag, b);
  }
  Result<int> Poll(std::span<Completion> out, Deadline deadline) override {
    return tcp_->Poll(out, deadline);
  }
  Status BeginGroup() override {
    if (in_group_) return FailedPrecondition("nested group");
    in_group_ = true;
    group_sizes.push_back(0);
    return Status::Ok();
  }
  Status EndGroup() override {
    in_group_ = false;
    return Status::Ok();
  }
  void Abort(const Status& reason) override { tcp_->Abort(reason); }

  std::vector<int> group_sizes;  // ops posted in each group, in order
  int posts_outside_groups = 0;

 private:
  void Record() { in_group_ ? ++group_sizes.back() : ++posts_outside_groups; }
  std::unique_ptr<Transport> tcp_;
  bool in_group_ = false;
};

const TransportRegistrar kGroupedTcp({"grouped_tcp", "tcp that asks to be grouped (test)", {},
                                      [](const TransportContext& context)
                                          -> Result<std::unique_ptr<Transport>> {
                                        FERRY_ASSIGN_OR_RETURN(
                                            auto tcp, TransportRegistry::Default().Create("tcp", context));
                                        return std::unique_ptr<Transport>(
                                            std::make_unique<GroupedTcp>(std::move(tcp)));
                                      }});

// ThreeRankPlan with each message's ends in one round and the relay a round after what it relays:
// messages 1 (0 -> 1) and 2 (0 -> 2) and their Packs in round 0, message 3 (2 -> 1, forwarding 2)
// in round 1.
TransferPlan RoundConsistentPlan() {
  TransferPlan plan = ThreeRankPlan();
  for (Op& op : plan.ops) {
    if (op.message == 1 || op.message == 2 || op.kind == OpKind::kPack) op.round = 0;
    if (op.message == 3) op.round = 1;
  }
  return plan;
}

// Rank 2's relayed copy of columns [512, 1024) reached rank 1's buffer 3 (the last hop).
bool RelayArrived(const Rank& r) {
  const auto* got = static_cast<const float*>(r.memory.destination[3].base);
  for (int64_t i = 0; i < kRows * 512; ++i) {
    if (got[i] != Value(i / 512, 512 + i % 512)) return false;
  }
  return true;
}

GroupedTcp* GroupedOf(Rank& r) {
  for (Transport* t : r.comm->transports()) {
    if (auto* g = dynamic_cast<GroupedTcp*>(t)) return g;
  }
  return nullptr;
}

TEST(ExecutorGroupedTest, EachRoundIsOneGroupEvenWithAWindowOfOne) {
  const TransferPlan plan = RoundConsistentPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port,
                       {"transport.network=grouped_tcp", "executor.max_in_flight=1",
                        "executor.direct_intra_node=false"});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (!stats.ok()) return Report(stats.status());
    if (rank == 1 && !RelayArrived(r)) return 2;
    GroupedTcp* g = GroupedOf(r);
    if (g == nullptr || g->posts_outside_groups != 0) return 3;
    // Rank 0: round 0 {send 1, send 2} as one group although the window holds one op; rank 1:
    // {recv 1}, {recv 3}; rank 2: {recv 2}, {forward 3}.
    const std::vector<int> expected = rank == 0 ? std::vector<int>{2} : std::vector<int>{1, 1};
    if (g->group_sizes != expected) return 4;
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// The plan as ThreeRankPlan builds it: message 2 is sent in round 1 but received in round 0, and
// rank 2 forwards in round 0 what it receives in round 0. Grouped, each rank refuses before posting.
TEST(ExecutorGroupedTest, PlansThatCannotRunRoundByRoundAreRefused) {
  const TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port,
                       {"transport.network=grouped_tcp", "executor.direct_intra_node=false"});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (stats.ok()) return 2;
    const std::string why = stats.status().message();
    if (why.find("sent in round 1 and received in round 0") == std::string::npos) return Report(stats.status());
    GroupedTcp* g = GroupedOf(r);
    return g != nullptr && g->group_sizes.empty() && g->posts_outside_groups == 0 ? 0 : 3;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// One rank moving a 4 MiB fp32 matrix to itself (planner.same_rank=transport) between two column
// splits of one buffer, so every message is packed and unpacked, in 16 chunks of 256 KiB, one per
// round, through a staging budget of four slots. Packs run on the copy pool (asynchronously, as
// they do on the GPU) and must not run rounds ahead and fill the arena, or the round that must go
// first finds no room for its receive and the run stalls.
TEST(ExecutorGroupedTest, PacksDoNotRunAheadOfTheRoundsThatMustGoFirst) {
  const TensorSpec spec{"w", {1024, 1024}, DType::kFP32};
  const std::array<int64_t, kMaxDims> row_major = {1024, 1};
  Layout src, dst;
  const int s = src.AddTensor(spec).value(), d = dst.AddTensor(spec).value();
  for (int64_t c : {0, 512}) {
    src.PlaceFragment(s, Box::Make({0, c}, {1024, c + 512}).value(), 0, "w", c * 4, row_major);
  }
  for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 256}, {256, 768}, {768, 1024}}) {
    dst.PlaceFragment(d, Box::Make({0, lo}, {1024, hi}).value(), 0, "w", lo * 4, row_major);
  }
  PlannerOptions options;
  options.same_rank = SameRankMode::kTransport;
  options.network_chunk_bytes = 256 << 10;
  auto planned = PlanReshard(src, dst, Topology::Uniform(1, 1), options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  const TransferPlan& plan = planned->plan;
  auto codes = RunRanks(1, 60, [&](int rank, int port) {
    auto joined = Join(rank, 1, port,
                       {"transport.same_rank=grouped_tcp", "executor.staging_budget=1MiB",
                        "executor.copy_threads=2"});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (!stats.ok()) return Report(stats.status());
    const auto* got = static_cast<const float*>(r.memory.destination[0].base);
    for (int64_t i = 0; i < 1024 * 1024; ++i) {
      if (got[i] != Value(i / kCols, i % kCols)) return 2;
    }
    GroupedTcp* g = GroupedOf(r);
    if (g == nullptr || g->posts_outside_groups != 0 || g->group_sizes.size() < 8) return 3;
    return stats->peak_staging_bytes <= (1 << 20) ? 0 : 4;
  });
  EXPECT_EQ(codes, (std::vector<int>{0}));
}

}  // namespace
}  // namespace ferry
