// Executor over real processes: hand-made plans run by forked ranks that rendezvous through the TCP
// store and talk over the tcp transport. Each child has a deadline; the parent kills children that
// outlive the test's own deadline.
#include "core/runtime/executor.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

#include "core/runtime/bootstrap.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/socket_util.h"
#include "core/runtime/transport.h"
#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

constexpr int kRows = 512, kCols = 1024;  // the source tensor: fp32 [512, 1024], 2 MiB

// Forks `size` ranks running body(rank, port); returns their exit codes (-SIGKILL when killed).
std::vector<int> RunRanks(int size, double deadline_seconds,
                          const std::function<int(int rank, int port)>& body) {
  auto probe = ListenTcp("127.0.0.1", 0);
  EXPECT_TRUE(probe.ok());
  int port = probe->port;
  ::close(probe->fd);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(deadline_seconds) + 5);  // a child never outlives the test
      int code = body(rank, port);
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(size), -SIGKILL);
  Deadline deadline = Deadline::AfterSeconds(deadline_seconds);
  int left = size;
  while (left > 0 && !deadline.Expired()) {
    for (int rank = 0; rank < size; ++rank) {
      if (children[rank] == 0) continue;
      int status = 0;
      if (::waitpid(children[rank], &status, WNOHANG) == children[rank]) {
        codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        children[rank] = 0;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (pid_t pid : children) {
    if (pid != 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  return codes;
}

float Value(int64_t row, int64_t col) { return static_cast<float>(row * 10000 + col); }

// Rank 0 holds the tensor. Rank 1 gets columns [0, 512) (packed, sent, unpacked) and, relayed by
// rank 2, a copy of rank 2's part; rank 2 gets columns [512, 1024) received straight into its
// destination buffer; rank 0 keeps rows [0, 32) by a local copy.
TransferPlan ThreeRankPlan(LinkClass link = LinkClass::kNetwork) {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 3;
  plan.source_buffers = {{0, "w", kRows * kCols * 4}};
  plan.destination_buffers = {{0, "rows", 32 * kCols * 4},
                              {1, "left", kRows * 512 * 4},
                              {2, "right", kRows * 512 * 4},
                              {1, "relayed", kRows * 512 * 4}};
  const int64_t half = kRows * 512 * 4;
  int slot_a = plan.AddSlot(0, half), slot_b = plan.AddSlot(0, half), slot_c = plan.AddSlot(1, half);
  Op pack_a{.kind = OpKind::kPack, .rank = 0, .bytes = half};
  int pa = plan.AddOp(pack_a, {},
                      {{Fp32Matrix(Space::kSource, 0, 0, kRows, 512, kCols),
                        Fp32Matrix(Space::kStaging, slot_a, 0, kRows, 512, 512)}});
  Op send_a{.kind = OpKind::kSend, .link = link, .rank = 0, .peer = 1, .message = 1, .bytes = half};
  send_a.SetData(ByteRange(Space::kStaging, slot_a, 0, half));
  plan.AddOp(send_a, {pa});
  Op pack_b{.kind = OpKind::kPack, .rank = 0, .round = 1, .bytes = half};
  int pb = plan.AddOp(pack_b, {},
                      {{Fp32Matrix(Space::kSource, 0, 512 * 4, kRows, 512, kCols),
                        Fp32Matrix(Space::kStaging, slot_b, 0, kRows, 512, 512)}});
  Op send_b{.kind = OpKind::kSend, .link = link, .rank = 0, .peer = 2, .message = 2, .round = 1,
            .bytes = half};
  send_b.SetData(ByteRange(Space::kStaging, slot_b, 0, half));
  plan.AddOp(send_b, {pb});
  Op copy{.kind = OpKind::kCopy, .link = LinkClass::kSameRank, .rank = 0, .bytes = 32 * kCols * 4};
  plan.AddOp(copy, {},
             {{Fp32Matrix(Space::kSource, 0, 0, 32, kCols, kCols),
               Fp32Matrix(Space::kDestination, 0, 0, 32, kCols, kCols)}});
  Op recv_c{.kind = OpKind::kRecv, .link = link, .rank = 1, .peer = 0, .message = 1, .bytes = half};
  recv_c.SetData(ByteRange(Space::kStaging, slot_c, 0, half));
  int rc = plan.AddOp(recv_c);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = half};
  plan.AddOp(unpack, {rc},
             {{Fp32Matrix(Space::kStaging, slot_c, 0, kRows, 512, 512),
               Fp32Matrix(Space::kDestination, 1, 0, kRows, 512, 512)}});
  Op recv_relayed{.kind = OpKind::kRecv, .link = link, .rank = 1, .peer = 2, .message = 3,
                  .bytes = half};
  recv_relayed.SetData(ByteRange(Space::kDestination, 3, 0, half));
  plan.AddOp(recv_relayed);
  Op recv_d{.kind = OpKind::kRecv, .link = link, .rank = 2, .peer = 0, .message = 2, .bytes = half};
  recv_d.SetData(ByteRange(Space::kDestination, 2, 0, half));
  int rd = plan.AddOp(recv_d);
  Op forward{.kind = OpKind::kForward, .link = link, .rank = 2, .peer = 1, .message = 3,
             .bytes = half};
  forward.SetData(ByteRange(Space::kDestination, 2, 0, half));
  plan.AddOp(forward, {rd});
  return plan;
}

struct Rank {
  Config config = RuntimeConfig();
  Rendezvous rendezvous;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Executor> executor;
  std::vector<std::vector<float>> storage;
  std::vector<SharedHostMemory> shared;
  RankMemory memory;
};

// Bootstraps rank `rank` of `size`, every rank on its own pretend node (so all links are network)
// unless `one_node`.
Result<std::unique_ptr<Rank>> Join(int rank, int size, int port,
                                   const std::vector<std::string>& settings = {},
                                   bool one_node = false) {
  auto r = std::make_unique<Rank>();
  for (const std::string& s : settings) {
    size_t eq = s.find('=');
    FERRY_RETURN_IF_ERROR(r->config.Set(s.substr(0, eq), s.substr(eq + 1)));
  }
  FERRY_RETURN_IF_ERROR(r->config.Set("tcp.address", "127.0.0.1"));
  BootstrapInfo info;
  info.rank = rank;
  info.size = size;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "executor-test";
  FERRY_ASSIGN_OR_RETURN(r->rendezvous, StartRendezvous(info, Deadline::AfterSeconds(20)));
  CommunicatorOptions options;
  options.rank = rank;
  options.size = size;
  options.store = r->rendezvous.store.get();
  options.config = &r->config;
  for (int i = 0; i < size; ++i) options.node_of_rank.push_back(one_node ? 0 : i);
  FERRY_ASSIGN_OR_RETURN(r->comm, Communicator::Create(options, Deadline::AfterSeconds(20)));
  FERRY_ASSIGN_OR_RETURN(r->executor, Executor::Create(*r->comm));
  return r;
}

// Plain heap memory, or (shared) each buffer in its own memfd block that same-node peers can map.
void Allocate(Rank& r, const TransferPlan& plan, int rank, bool shared = false) {
  auto fill = [&](const BufferTable& specs, std::vector<MemoryDesc>& out, bool source) {
    for (const BufferTable::Entry& spec : specs) {
      if (spec.rank != rank) {
        out.push_back({});
        continue;
      }
      float* data = nullptr;
      if (shared) {
        r.shared.push_back(std::move(SharedHostMemory::Allocate(spec.bytes, "ferry-test").value()));
        data = reinterpret_cast<float*>(r.shared.back().data());
        out.push_back(r.shared.back().desc());
      } else {
        r.storage.emplace_back(static_cast<size_t>(spec.bytes / 4), -1.0f);
        data = r.storage.back().data();
        out.push_back({data, spec.bytes, MemoryKind::kHost, -1});
      }
      for (int64_t i = 0; i < spec.bytes / 4; ++i) data[i] = source ? Value(i / kCols, i % kCols) : -1.0f;
    }
  };
  r.storage.reserve(16);
  r.shared.reserve(16);
  fill(plan.source_buffers, r.memory.source, true);
  fill(plan.destination_buffers, r.memory.destination, false);
}

bool Verify(const Rank& r, int rank) {
  auto dest = [&](int buffer) { return static_cast<const float*>(r.memory.destination[buffer].base); };
  if (rank == 0) {
    for (int64_t i = 0; i < 32 * kCols; ++i) {
      if (dest(0)[i] != Value(i / kCols, i % kCols)) return false;
    }
  }
  if (rank == 1) {
    for (int64_t i = 0; i < kRows * 512; ++i) {
      if (dest(1)[i] != Value(i / 512, i % 512)) return false;
      if (dest(3)[i] != Value(i / 512, 512 + i % 512)) return false;
    }
  }
  if (rank == 2) {
    for (int64_t i = 0; i < kRows * 512; ++i) {
      if (dest(2)[i] != Value(i / 512, 512 + i % 512)) return false;
    }
  }
  return true;
}

int Report(const Status& status) {
  std::fprintf(stderr, "rank failed: %s\n", status.ToString().c_str());
  return 1;
}

TEST(ExecutorTest, ThreeProcessesOverTcpPackSendUnpackForwardAndCopy) {
  TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    // A staging budget that fits one slot at a time forces rank 0's packs to take turns.
    auto joined = Join(rank, 3, port, {"executor.staging_budget=1100KiB", "executor.copy_threads=2"});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    Allocate(r, plan, rank);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      if (!Verify(r, rank)) return 2;
      if (stats->peak_staging_bytes > 1100 * 1024) return 3;
      if (rank == 0 && stats->bytes_sent != 2 * kRows * 512 * 4) return 4;
      // Every link of this plan is a network link.
      if (stats->bytes_sent_network != stats->bytes_sent || stats->bytes_sent_intra_node != 0) return 6;
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// Ranks of one node: message 1 (rank 0 -> 1, pack/unpack) goes as a direct read, by mapping rank
// 0's memfd buffer (shared) or through process_vm_readv (plain memory); message 2 feeds a Forward,
// so it and the relayed message 3 keep the staged path. With executor.direct_intra_node=false
// everything is staged. Data is checked either way.
void RunSameNode(bool shared, bool direct) {
  TransferPlan plan = ThreeRankPlan(LinkClass::kSameNode);
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {std::string("executor.direct_intra_node=") + (direct ? "true" : "false")},
                       /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    Allocate(r, plan, rank, shared);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok() && stats.status().message().find("process_vm_readv from peer") != std::string::npos &&
          stats.status().code() == StatusCode::kFailedPrecondition) {
        return 6;  // ptrace access between processes is denied on this machine
      }
      if (!stats.ok()) return Report(stats.status());
      if (!Verify(r, rank)) return 2;
      const int64_t direct_bytes = rank == 1 && direct ? kRows * 512 * 4 : 0;
      if (stats->bytes_read_direct != direct_bytes) {
        std::fprintf(stderr, "rank %d read %lld bytes directly\n", rank,
                     static_cast<long long>(stats->bytes_read_direct));
        return 3;
      }
      // Rank 0 sends message 2 staged, and message 1 too unless it goes direct.
      if (rank == 0 && stats->bytes_sent != (direct ? 1 : 2) * kRows * 512 * 4) return 4;
      // Every link of this plan is a same-node link.
      if (stats->bytes_sent_intra_node != stats->bytes_sent || stats->bytes_sent_network != 0) return 7;
      for (const MemoryDesc& d : r.memory.destination) {  // the next refit must write it all again
        for (int64_t i = 0; i < d.bytes / 4; ++i) static_cast<float*>(d.base)[i] = -1.0f;
      }
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  if (!shared && codes[1] == 6) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(ExecutorTest, SameNodeMessageIsOneCopyFromMappedSharedMemory) { RunSameNode(true, true); }
TEST(ExecutorTest, SameNodeMessageIsOneCopyThroughProcessVmReadv) { RunSameNode(false, true); }
TEST(ExecutorTest, SameNodeMessagesAreStagedWhenDirectReadsAreOff) { RunSameNode(true, false); }

TEST(ExecutorTest, DirectReaderOfADeadSenderFailsNamingThePeer) {
  TransferPlan plan = ThreeRankPlan(LinkClass::kSameNode);
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    // Rank 0 hosts the store: everyone has joined before it goes, so only the refit sees it die.
    if (!FinalBarrier(*r.rendezvous.store, "joined", rank, 3, 0, Deadline::AfterSeconds(20)).ok()) return 9;
    if (rank == 0) ::_exit(0);  // the sender dies before offering anything
    if (rank == 2) {  // stays alive and out of the refit, so rank 1's only failing peer is rank 0
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return 0;
    }
    Allocate(r, plan, rank, true);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (stats.ok()) return 10;
    std::string message = stats.status().message();
    std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
    return message.find("peer 0") != std::string::npos ? 7 : 8;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 7) << "rank 1 waits on rank 0's offer";
}

TEST(ExecutorTest, PeerThatExitsFailsTheOthersNamingOpPeerAndTransport) {
  TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (rank == 2) ::_exit(0);  // dies without running its part
    Allocate(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    // Rank 0 only sends: its 1 MiB messages may all fit in socket buffers before rank 2 dies.
    if (stats.ok()) return rank == 0 ? 0 : 10;
    std::string message = stats.status().message();
    std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
    bool named = message.find("op ") != std::string::npos &&
                 message.find("peer") != std::string::npos &&
                 message.find("tcp") != std::string::npos;
    return named ? 7 : 8;
  });
  EXPECT_TRUE(codes[0] == 0 || codes[0] == 7) << codes[0];
  EXPECT_EQ(codes[1], 7) << "rank 1 waits on a message from the dead rank 2";
  EXPECT_EQ(codes[2], 0);
}

TEST(ExecutorTest, DeadlineNamesTheStuckReceive) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.destination_buffers = {{0, "d", 1024}};
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kNetwork, .rank = 0, .peer = 1, .message = 9,
          .bytes = 1024};
  recv.SetData(ByteRange(Space::kDestination, 0, 0, 1024));
  plan.AddOp(recv);
  auto codes = RunRanks(2, 30, [&](int rank, int port) {
    auto joined = Join(rank, 2, port);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    Allocate(r, plan, rank);
    if (rank == 1) {  // alive but never sends
      return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
    }
    auto started = std::chrono::steady_clock::now();
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(0.5));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    (void)FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20));
    if (stats.ok()) return 10;
    std::fprintf(stderr, "%s\n", stats.status().ToString().c_str());
    bool named = stats.status().code() == StatusCode::kDeadlineExceeded &&
                 stats.status().message().find("recv of message 9 from peer 1 over tcp") !=
                     std::string::npos;
    return named && took < 5 ? 7 : 8;
  });
  EXPECT_EQ(codes, (std::vector<int>{7, 0}));
}

}  // namespace
}  // namespace ferry
