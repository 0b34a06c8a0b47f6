// The library facade: RefitPlan reads the planner's options from a Config; Refit binds a plan to a
// session (checking the topology against the communicator), takes buffers by name or index with
// their sizes and owners checked, and runs the same plan many times over tcp between threads; a
// destination stored transformed (vLLM's Mamba A) holds the transform of the source's values; a
// failed run names the destination tensors it wrote whole, and a resumed one moves only the rest.
#include "core/refit/refit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "core/base/float_convert.h"
#include "core/layout/builders.h"
#include "core/refit/config.h"
#include "core/runtime/socket_util.h"
#include "core/layout/topology.h"

namespace ferry {
namespace {

constexpr int64_t kRows = 64, kCols = 48;

// One fp32 [64, 48] tensor "w": rows split over source ranks 0 and 1, columns split over
// destination ranks 2 and 3. Buffers are named after the tensor.
struct Layouts {
  Layout source, destination;
};

Layouts RowsToColumns() {
  Layouts l;
  const TensorSpec w{"w", {kRows, kCols}, DType::kFP32};
  EXPECT_TRUE(AddColumnParallel(l.source, w, {0, 1}).ok());
  EXPECT_TRUE(AddRowParallel(l.destination, w, {2, 3}).ok());
  return l;
}

// The reshard plan of RowsToColumns on four ranks, `gpus_per_node` to a node.
Result<std::shared_ptr<const RefitPlan>> PlanRowsToColumns(int gpus_per_node, const Config& config) {
  Layouts l = RowsToColumns();
  return RefitPlan::Make(std::move(l.source), std::move(l.destination), Topology::Uniform(4, gpus_per_node),
                         Strategy::kReshard, config);
}

TEST(RefitPlanTest, PlansWithTheConfigsPlannerOptions) {
  Config config = DefaultConfig();
  auto whole = PlanRowsToColumns(1, config);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_TRUE(config.Set("planner.network_chunk_bytes", "1KiB").ok());
  auto chunked = PlanRowsToColumns(1, config);
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_EQ((*chunked)->options().network_chunk_bytes, 1024);
  EXPECT_GT((*chunked)->Stats().network_messages, (*whole)->Stats().network_messages);
  EXPECT_EQ((*chunked)->Stats().bytes_by_link, (*whole)->Stats().bytes_by_link);

  ASSERT_TRUE(config.Set("planner.network_chunk_bytes", "0").ok());
  Status bad = PlanRowsToColumns(1, config).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("planner.network_chunk_bytes"), std::string::npos) << bad.ToString();
  ASSERT_TRUE(config.Set("planner.network_chunk_bytes", "4MiB").ok());
  ASSERT_TRUE(config.Set("planner.relay", "sometimes").ok());
  bad = PlanRowsToColumns(1, config).status();
  EXPECT_NE(bad.message().find("'sometimes' is not one of auto, off, on"), std::string::npos) << bad.ToString();
}

TEST(RefitPlanTest, EveryLayersOptionsAreInTheDefaultConfig) {
  const Config config = DefaultConfig();
  for (const char* name : {"planner.fanout_chunk_bytes", "executor.staging_budget", "deadline.refit",
                           "transport.network", "tcp.address"}) {
    EXPECT_TRUE(config.GetString(name).ok()) << name;
  }
  EXPECT_EQ(*config.GetString("planner.network_chunk_bytes"), "32MiB");
  EXPECT_EQ(PlannerOptions::FromConfig(config)->network_chunk_bytes, PlannerOptions{}.network_chunk_bytes);
}

// What one rank's thread reports back.
struct RankOutcome {
  Status status;
  std::vector<float> destination;  // the rank's destination buffer after the runs
  RefitStats stats;
};

// Joins `size` ranks as threads over tcp, each on the node `node_of_rank` says, calls
// `body(rank, session, outcome)` on each, then finishes the sessions together.
// `settings` ("name=value") apply after the test's defaults.
template <typename Body>
std::vector<RankOutcome> RunRanks(int size, const std::vector<int>& node_of_rank, Body body,
                                  const std::vector<std::string>& settings = {}) {
  auto probe = ListenTcp("127.0.0.1", 0);
  EXPECT_TRUE(probe.ok());
  const int port = probe->port;
  ::close(probe->fd);
  std::vector<RankOutcome> outcomes(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      Config config = DefaultConfig();
      for (const char* option : {"transport.network", "transport.intra_node"}) {
        EXPECT_TRUE(config.Set(option, "tcp").ok());
      }
      EXPECT_TRUE(config.Set("tcp.address", "127.0.0.1").ok());
      EXPECT_TRUE(config.Set("deadline.connect", "20s").ok());
      EXPECT_TRUE(config.Set("deadline.refit", "20s").ok());
      for (const std::string& setting : settings) {
        const size_t eq = setting.find('=');
        EXPECT_TRUE(config.Set(setting.substr(0, eq), setting.substr(eq + 1)).ok()) << setting;
      }
      BootstrapInfo info;
      info.rank = rank;
      info.size = size;
      info.store_host = "127.0.0.1";
      info.store_port = port;
      info.token = "refit-test";
      auto session = Session::Join(info, std::move(config), node_of_rank);
      if (!session.ok()) {
        outcomes[rank].status = session.status();
        return;
      }
      body(rank, **session, outcomes[rank]);
      // Every rank meets at the last barrier, failed or not, so rank 0 keeps the store up for all.
      Status finished = (*session)->Finish();
      if (outcomes[rank].status.ok()) outcomes[rank].status = finished;
    });
  }
  for (std::thread& t : threads) t.join();
  return outcomes;
}

MemoryDesc Host(std::vector<float>& data) {
  return MemoryDesc{data.data(), static_cast<int64_t>(data.size() * sizeof(float)), MemoryKind::kHost, -1};
}

TEST(RefitTest, RunsOnePlanManyTimesOnBuffersRegisteredByName) {
  auto plan = PlanRowsToColumns(1, DefaultConfig());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto outcomes = RunRanks(4, {0, 1, 2, 3}, [&](int rank, Session& session, RankOutcome& out) {
    auto refit = Refit::Create(session, *plan);
    if (!refit.ok()) {
      out.status = refit.status();
      return;
    }
    std::vector<float> source(kRows / 2 * kCols), destination(kRows * kCols / 2);
    if (rank < 2) {
      // Source rank r holds rows [32 r, 32 r + 32): element (i, j) = i * 1000 + j.
      for (int64_t i = 0; i < kRows / 2; ++i) {
        for (int64_t j = 0; j < kCols; ++j) source[i * kCols + j] = static_cast<float>((i + 32 * rank) * 1000 + j);
      }
      out.status = (*refit)->RegisterSource("w", Host(source));
    } else {
      out.status = (*refit)->RegisterDestination("w", Host(destination));
    }
    for (int step = 0; step < 3 && out.status.ok(); ++step) {
      std::fill(destination.begin(), destination.end(), -1.0f);
      Result<RefitStats> stats = (*refit)->Run();
      out.status = stats.status();
      if (stats.ok()) out.stats = *stats;
    }
    out.destination = destination;
    // After a successful Run every destination tensor the rank holds is complete ("w", index 0);
    // the source ranks hold none.
    if (out.status.ok() && (*refit)->CompleteDestinationTensors() != std::vector<int>(rank < 2 ? 0 : 1, 0)) {
      out.status = Internal("complete tensors after a successful run are not the rank's");
    }
  });
  for (int rank = 0; rank < 4; ++rank) ASSERT_TRUE(outcomes[rank].status.ok()) << rank << ": " << outcomes[rank].status.ToString();
  for (int rank = 2; rank < 4; ++rank) {
    // Destination rank 2 + c holds columns [24 c, 24 c + 24) of every row.
    const int c = rank - 2;
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols / 2; ++j) {
        ASSERT_EQ(outcomes[rank].destination[i * kCols / 2 + j], static_cast<float>(i * 1000 + j + 24 * c))
            << "rank " << rank << " row " << i << " col " << j;
      }
    }
  }
  // Each source rank sends its rows' halves to both destinations over the network: 32 x 48 floats.
  EXPECT_EQ(outcomes[0].stats.bytes_by_link[static_cast<int>(LinkClass::kNetwork)], kRows / 2 * kCols * 4);
  EXPECT_EQ(outcomes[0].stats.executor.bytes_sent, kRows / 2 * kCols * 4);
  // A Run delivers every destination byte a rank holds: half of w's columns on each of 2 and 3.
  EXPECT_EQ(outcomes[0].stats.bytes_delivered, 0);
  EXPECT_EQ(outcomes[2].stats.bytes_delivered, kRows * kCols / 2 * 4);
  EXPECT_GT(outcomes[2].stats.seconds, 0);
}

// A refit that stops part way names the destination tensors it finished, and RunRest moves only
// the others. Four fp32 [64, 48]
// tensors (12 KiB each, one network message each) go whole from rank 0 to rank 1 on another
// node; rank 0's transport drops its third send (fault.action=drop: reported sent, never
// delivered), so rank 1 gets three of the four and fails at its deadline. Before a Run nothing is
// complete; after the failed one exactly the three delivered tensors are, and they hold the new
// values. (After a successful Run, all are: RunsOnePlanManyTimesOnBuffersRegisteredByName.) After
// the communicator's Recreate, RunRest sends the one missing tensor, and then all four are.
TEST(RefitTest, AfterAFailedRunTheCompleteTensorsAreNamedAndTheRestIsMoved) {
  constexpr int kTensors = 4;
  Layout source, destination;
  for (int t = 0; t < kTensors; ++t) {
    const TensorSpec spec{"t" + std::to_string(t), {kRows, kCols}, DType::kFP32};
    ASSERT_TRUE(AddReplicated(source, spec, {0}).ok());
    ASSERT_TRUE(AddReplicated(destination, spec, {1}).ok());
  }
  Config plan_config = DefaultConfig();
  ASSERT_TRUE(plan_config.Set("planner.network_chunk_bytes", "12KiB").ok());
  auto plan = RefitPlan::Make(std::move(source), std::move(destination), Topology::Uniform(2, 1),
                              Strategy::kReshard, plan_config);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ((*plan)->Stats().network_messages, kTensors);
  std::vector<std::vector<float>> received(kTensors), rested(kTensors);
  std::vector<int> before, after_failure, after_rest;
  Status first_run;
  std::atomic<bool> first_run_over = false;
  auto outcomes = RunRanks(
      2, {0, 1},
      [&](int rank, Session& session, RankOutcome& out) {
        auto refit = Refit::Create(session, *plan);
        if (!refit.ok()) {
          out.status = refit.status();
          return;
        }
        std::vector<std::vector<float>> data(kTensors, std::vector<float>(kRows * kCols, -1.0f));
        for (int t = 0; t < kTensors; ++t) {
          if (rank == 0) std::fill(data[t].begin(), data[t].end(), static_cast<float>(t + 1));
          const std::string name = "t" + std::to_string(t);
          out.status = rank == 0 ? (*refit)->RegisterSource(name, Host(data[t]))
                                 : (*refit)->RegisterDestination(name, Host(data[t]));
          if (!out.status.ok()) return;
        }
        if (rank == 1) before = (*refit)->CompleteDestinationTensors();
        Status run = (*refit)->Run().status();
        if (rank == 1) {
          first_run = run;
          after_failure = (*refit)->CompleteDestinationTensors();
          received = data;
          first_run_over = true;
        }
        // Rank 0's Run succeeds once its sends are posted. It recreates the communicator only
        // once rank 1's Run has failed, as a recovery would: recreating earlier aborts the
        // transports under sends rank 1 has not received yet.
        const Deadline failed_by = Deadline::AfterSeconds(30);
        while (!first_run_over && !failed_by.Expired()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // Every rank recreates the aborted communicator and moves only what is missing: one
        // message, so rank 0's fresh fault transport (which drops a third send) drops nothing.
        out.status = session.communicator().Recreate(Deadline::AfterSeconds(20));
        if (!out.status.ok()) return;
        Result<RefitStats> rest = (*refit)->RunRest(Deadline::AfterSeconds(20));
        out.status = rest.status();
        if (!rest.ok()) return;
        out.stats = *rest;
        if (rank == 1) {
          after_rest = (*refit)->CompleteDestinationTensors();
          rested = data;
        }
      },
      {"transport.network=fault", "fault.inner=tcp", "fault.rank=0", "fault.op=send",
       "fault.after=2", "fault.action=drop", "deadline.refit=3s"});
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(outcomes[rank].status.ok()) << rank << ": " << outcomes[rank].status.ToString()
                                            << " (rank 1's first run: " << first_run.ToString() << ")";
  }
  EXPECT_TRUE(before.empty());
  ASSERT_FALSE(first_run.ok());
  ASSERT_EQ(after_failure.size(), 3u) << first_run.ToString();
  std::vector<int> missing;
  for (int t = 0; t < kTensors; ++t) {
    const bool complete = std::count(after_failure.begin(), after_failure.end(), t) > 0;
    const bool new_values = std::all_of(received[t].begin(), received[t].end(),
                                        [&](float v) { return v == static_cast<float>(t + 1); });
    EXPECT_EQ(complete, new_values) << "tensor t" << t;
    if (!complete) missing.push_back(t);
  }
  ASSERT_EQ(missing.size(), 1u);
  // RunRest moved the one missing tensor and nothing else; every tensor now holds its value.
  EXPECT_EQ(outcomes[1].stats.executor.bytes_received, kRows * kCols * 4);
  EXPECT_EQ(outcomes[0].stats.executor.bytes_sent, kRows * kCols * 4);
  // What the resumed refit had left to deliver: one tensor on rank 1, none on rank 0.
  EXPECT_EQ(outcomes[1].stats.bytes_delivered, kRows * kCols * 4);
  EXPECT_EQ(outcomes[0].stats.bytes_delivered, 0);
  EXPECT_EQ(after_rest, (std::vector<int>{0, 1, 2, 3}));
  for (int t = 0; t < kTensors; ++t) {
    EXPECT_TRUE(std::all_of(rested[t].begin(), rested[t].end(),
                            [&](float v) { return v == static_cast<float>(t + 1); }))
        << "tensor t" << t;
  }
}

TEST(RefitTest, RegistrationNamesWhatIsWrong) {
  auto plan = PlanRowsToColumns(1, DefaultConfig());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto outcomes = RunRanks(4, {0, 1, 2, 3}, [&](int rank, Session& session, RankOutcome& out) {
    auto refit = Refit::Create(session, *plan);
    if (!refit.ok() || rank != 0) {
      out.status = refit.status();
      return;
    }
    std::vector<float> small(10), enough(kRows / 2 * kCols);
    auto expect = [&](Status s, const std::string& text) {
      if (s.ok() || s.message().find(text) == std::string::npos) {
        out.status = Internal("expected an error with '" + text + "', got " + s.ToString());
      }
    };
    expect((*refit)->RegisterSource("nope", Host(enough)), "no buffer 'nope' on rank 0");
    expect((*refit)->RegisterSource("w", Host(small)), "needs 6144 bytes; the memory given has 40");
    expect((*refit)->RegisterDestination(0, Host(enough)), "belongs to rank 2, not to rank 0");
    expect((*refit)->RegisterSource(7, Host(enough)), "source buffer 7 does not exist");
    if (out.status.ok()) expect((*refit)->Run().status(), "source buffer 'w' of rank 0 is not registered");
  });
  for (int rank = 0; rank < 4; ++rank) EXPECT_TRUE(outcomes[rank].status.ok()) << rank << ": " << outcomes[rank].status.ToString();
}

TEST(RefitTest, ATopologyThatDisagreesWithTheHostsIsRefusedNamingTheRank) {
  // The plan puts all four ranks on one node; the communicator is told ranks 2 and 3 are elsewhere.
  auto plan = PlanRowsToColumns(4, DefaultConfig());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto outcomes = RunRanks(4, {0, 0, 1, 1}, [&](int, Session& session, RankOutcome& out) {
    out.status = Refit::Create(session, *plan).status();
  });
  EXPECT_EQ(outcomes[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(outcomes[0].status.message().find("rank 2 disagrees with the plan's topology"), std::string::npos)
      << outcomes[0].status.ToString();
  EXPECT_NE(outcomes[3].status.message().find("rank 0 disagrees"), std::string::npos)
      << outcomes[3].status.ToString();
}

// Message bytes the plan sends over each link class, from its Send and Forward ops.
std::array<int64_t, 3> MessageBytesByLink(const TransferPlan& plan) {
  std::array<int64_t, 3> bytes{};
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kSend || op.kind == OpKind::kForward) bytes[static_cast<int>(op.link)] += op.bytes;
  }
  return bytes;
}

// One plan over two transports at once: two pretend nodes of two ranks, tcp between the nodes and
// local (threads of this process) plus direct reads inside them. The rows of w live on node 0
// (ranks 0, 1); ranks 1, 2 and 3 want all of it, so rank 1 reads rank 0's half inside node 0,
// and node 1 receives w once over the network and fans it out inside. Each transport's received
// bytes, summed over the ranks, equal the plan's message bytes of the link class it serves.
TEST(RefitTest, MixedTransportsCarryWhatThePlansLinkClassesSay) {
  const TensorSpec w{"w", {kRows, kCols}, DType::kFP32};
  Layout source, destination;
  ASSERT_TRUE(AddColumnParallel(source, w, {0, 1}).ok());
  ASSERT_TRUE(AddReplicated(destination, w, {1, 2, 3}).ok());
  auto plan = RefitPlan::Make(std::move(source), std::move(destination), Topology::Uniform(4, 2),
                              Strategy::kReshard, DefaultConfig());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::array<int64_t, 3> expected = MessageBytesByLink((*plan)->plan());
  ASSERT_GT(expected[static_cast<int>(LinkClass::kNetwork)], 0);
  ASSERT_GT(expected[static_cast<int>(LinkClass::kSameNode)], 0);
  auto outcomes = RunRanks(
      4, {0, 0, 1, 1},
      [&](int rank, Session& session, RankOutcome& out) {
        auto refit = Refit::Create(session, *plan);
        if (!refit.ok()) {
          out.status = refit.status();
          return;
        }
        std::vector<float> rows(kRows / 2 * kCols, static_cast<float>(rank)), all(kRows * kCols);
        if (rank < 2) out.status = (*refit)->RegisterSource("w", Host(rows));
        if (rank > 0 && out.status.ok()) out.status = (*refit)->RegisterDestination("w", Host(all));
        Result<RefitStats> stats = out.status.ok() ? (*refit)->Run() : Result<RefitStats>(out.status);
        out.status = stats.status();
        if (stats.ok()) out.stats = *stats;
      },
      {"transport.network=tcp", "transport.intra_node=local", "executor.direct_intra_node=true"});
  std::map<std::string, TransportTraffic> total;
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(outcomes[rank].status.ok()) << rank << ": " << outcomes[rank].status.ToString();
    for (const auto& [name, traffic] : outcomes[rank].stats.executor.by_transport) total[name] += traffic;
  }
  for (const auto& [name, traffic] : total) {
    EXPECT_TRUE(name == "tcp" || name == "local" || name == kDirectReadPath) << "unexpected path " << name;
  }
  const int64_t network = expected[static_cast<int>(LinkClass::kNetwork)];
  const int64_t same_node = expected[static_cast<int>(LinkClass::kSameNode)];
  EXPECT_EQ(total["tcp"].bytes_received, network);
  EXPECT_EQ(total["tcp"].bytes_sent, network);
  EXPECT_EQ(total["local"].bytes_received + total[std::string(kDirectReadPath)].bytes_received, same_node);
  EXPECT_GT(total[std::string(kDirectReadPath)].bytes_received, 0) << "rank 1 reads rank 0's half directly";
}

// vLLM's Mamba A (vllm/model_executor/layers/mamba/mamba_mixer2.py: fp32 -exp(A_log), split by
// head over TP) refit from Megatron's bf16 A_log split by head over ranks 0 and 1 into vLLM TP2 on
// ranks 2 and 3, over tcp between four nodes and inside one node with direct reads on (each
// message then fills one rank's A whole, which a direct read would copy without the function if
// it took the Convert's place): ranks 2 and 3 hold, bit for bit, the CPU reference
// -std::exp(float(A_log)) of their heads, random bf16 bits (NaN, infinities and subnormals among
// them).
void RefitMambaA(const std::vector<int>& node_of_rank, const std::vector<std::string>& settings) {
  constexpr int64_t kHeads = 256, kHalf = kHeads / 2;
  const std::string name = "backbone.layers.0.mixer.A_log";
  Layout source, destination;
  const int s = source.AddTensor({name, {kHeads}, DType::kBF16}).value();
  const int d = destination.AddTensor({name, {kHeads}, DType::kBF16}).value();
  for (int r = 0; r < 2; ++r) {
    const Box heads = Box::Make({r * kHalf}, {(r + 1) * kHalf}).value();
    source.AppendFragment(s, heads, r, "A_log");
    destination.PlaceFragment(d, heads, 2 + r, "A", 0, RowMajorStrides({kHalf}));
    destination.buffers.SetBytes(static_cast<size_t>(destination.FindBuffer(2 + r, "A")), kHalf * 4);
  }
  destination.transforms.push_back({d, "A = -exp(A_log)", DType::kFP32});
  const int nodes = *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  auto plan = RefitPlan::Make(std::move(source), std::move(destination), Topology::Uniform(4, 4 / nodes),
                              Strategy::kReshard, DefaultConfig());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<uint16_t> a_log(kHeads);
  std::mt19937 rng(23);
  for (uint16_t& bits : a_log) bits = static_cast<uint16_t>(rng());
  a_log[0] = 0x7f80;           // +inf
  a_log[1] = 0xff80;           // -inf
  a_log[kHalf] = 0x7fc1;       // NaN
  a_log[kHalf + 1] = 0x0001;   // the smallest bf16 subnormal
  auto outcomes = RunRanks(
      4, node_of_rank,
      [&](int rank, Session& session, RankOutcome& out) {
        auto refit = Refit::Create(session, *plan);
        if (!refit.ok()) {
          out.status = refit.status();
          return;
        }
        std::vector<uint16_t> half(a_log.begin() + rank % 2 * kHalf, a_log.begin() + (rank % 2 + 1) * kHalf);
        const MemoryDesc half_memory{half.data(), kHalf * 2, MemoryKind::kHost, -1};
        std::vector<float> a(kHalf, 0.0f);
        out.status = rank < 2 ? (*refit)->RegisterSource("A_log", half_memory) : (*refit)->RegisterDestination("A", Host(a));
        Result<RefitStats> stats = out.status.ok() ? (*refit)->Run() : Result<RefitStats>(out.status);
        out.status = stats.status();
        out.destination = a;
      },
      settings);
  for (int rank = 0; rank < 4; ++rank) ASSERT_TRUE(outcomes[rank].status.ok()) << rank << ": " << outcomes[rank].status.ToString();
  for (int64_t head = 0; head < kHeads; ++head) {
    const uint16_t bits = a_log[static_cast<size_t>(head)];
    const float want = -std::exp(BF16ToFloat(bits));
    uint32_t want_bits, got_bits;
    std::memcpy(&want_bits, &want, 4);
    std::memcpy(&got_bits, &outcomes[2 + head / kHalf].destination[static_cast<size_t>(head % kHalf)], 4);
    ASSERT_EQ(got_bits, want_bits) << "head " << head << " A_log bits " << bits;
  }
}

TEST(RefitTest, MambaAIsMinusExpOfALogBitForBitOverTcp) { RefitMambaA({0, 1, 2, 3}, {}); }

TEST(RefitTest, MambaAIsMinusExpOfALogBitForBitWithDirectReads) {
  RefitMambaA({0, 0, 0, 0}, {"transport.intra_node=local", "executor.direct_intra_node=true"});
}

}  // namespace
}  // namespace ferry
