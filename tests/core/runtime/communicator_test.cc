// Communicator with ranks as threads of this process (local transport within a "node", tcp across
// pretend nodes): link classes, abort within its deadline, recreate with a new epoch, and messages
// of an old epoch never delivered to the new one.
#include "core/runtime/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "core/runtime/executor.h"
#include "transports/local/local_transport.h"

namespace ferry {
namespace {

// Runs body(rank) on `size` threads; each thread gets its own communicator on a shared store.
struct ThreadWorld {
  explicit ThreadWorld(int size) : size(size) {
    config.Set("transport.intra_node", "local").ok();
    config.Set("tcp.address", "127.0.0.1").ok();
    config.Set("deadline.abort", "1s").ok();
  }
  void Run(const std::function<void(Communicator&)>& body) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size; ++rank) {
      threads.emplace_back([&, rank] {
        CommunicatorOptions options;
        options.rank = rank;
        options.size = size;
        options.store = &store;
        options.config = &config;
        options.node_of_rank = {0, 0, 1};  // ranks 0 and 1 share a node; rank 2 is remote
        auto comm = Communicator::Create(options, Deadline::AfterSeconds(20));
        ASSERT_TRUE(comm.ok()) << comm.status().ToString();
        body(**comm);
      });
    }
    for (auto& t : threads) t.join();
  }
  int size;
  Config config = RuntimeConfig();
  InMemoryStore store;
};

TEST(CommunicatorTest, LinkClassesPickTransportsFromConfig) {
  ThreadWorld world(3);
  world.Run([](Communicator& comm) {
    EXPECT_EQ(comm.epoch(), 1u);
    EXPECT_EQ(comm.LinkTo(comm.rank()), LinkClass::kSameRank);
    EXPECT_EQ(comm.TransportNameFor(comm.rank()), "local");
    if (comm.rank() == 0) {
      EXPECT_EQ(comm.LinkTo(1), LinkClass::kSameNode);
      EXPECT_EQ(comm.TransportNameFor(1), "local");
      EXPECT_EQ(comm.LinkTo(2), LinkClass::kNetwork);
      EXPECT_EQ(comm.TransportNameFor(2), "tcp");
    }
    EXPECT_NE(comm.Tag(5), comm.Tag(6));
  });
}

TEST(CommunicatorTest, UnknownTransportIsAClearError) {
  InMemoryStore store;
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("transport.same_rank", "carrier-pigeon").ok());
  CommunicatorOptions options;
  options.store = &store;
  options.config = &config;
  auto comm = Communicator::Create(options, Deadline::AfterSeconds(5));
  EXPECT_EQ(comm.status().code(), StatusCode::kNotFound);
  EXPECT_NE(comm.status().message().find("carrier-pigeon"), std::string::npos);
}

TransferPlan OneMessage(int64_t bytes) {
  TransferPlan plan;
  plan.num_ranks = 3;
  plan.source_buffers = {{0, "s", bytes}};
  plan.destination_buffers = {{2, "d", bytes}};
  Op send;
  send.kind = OpKind::kSend;
  send.rank = 0;
  send.peer = 2;
  send.message = 7;
  send.bytes = bytes;
  send.SetData(ByteRange(Space::kSource, 0, 0, bytes));
  plan.AddOp(send);
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 2;
  recv.peer = 0;
  recv.SetData(ByteRange(Space::kDestination, 0, 0, bytes));
  plan.AddOp(recv);
  return plan;
}

TEST(CommunicatorTest, AbortThenRecreateDropsOldEpochMessages) {
  ThreadWorld world(3);
  TransferPlan send_only = OneMessage(4096);
  send_only.ops.pop_back();  // epoch 1: rank 0 sends message 7, nobody receives it
  TransferPlan full = OneMessage(4096);
  world.Run([&](Communicator& comm) {
    std::vector<uint8_t> source(4096, 0xAA), destination(4096, 0);  // 0xAA: the stale payload
    RankMemory memory;
    memory.source = {{source.data(), 4096, MemoryKind::kHost, -1}};
    memory.destination = {{destination.data(), 4096, MemoryKind::kHost, -1}};
    if (comm.rank() == 0) {
      auto executor = Executor::Create(comm);
      ASSERT_TRUE(executor.ok());
      // Over tcp a small send completes into the socket buffer; it is never received.
      (void)(*executor)->Run(send_only, memory, Deadline::AfterSeconds(0.3));
    }
    ASSERT_TRUE(Barrier(world.store, "epoch1", 3, Deadline::AfterSeconds(20)).ok());
    auto started = std::chrono::steady_clock::now();
    comm.Abort(Aborted("test abort"));
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1500));
    EXPECT_TRUE(comm.aborted());
    EXPECT_FALSE(comm.TransportFor(0).ok());
    auto executor = Executor::Create(comm);
    ASSERT_TRUE(executor.ok());
    EXPECT_FALSE((*executor)->Run(full, memory, Deadline::AfterSeconds(1)).ok());
    ASSERT_TRUE(comm.Recreate(Deadline::AfterSeconds(20)).ok());
    EXPECT_EQ(comm.epoch(), 2u);
    EXPECT_FALSE(comm.aborted());
    std::fill(source.begin(), source.end(), 0xBB);
    auto stats = (*executor)->Run(full, memory, Deadline::AfterSeconds(20));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    if (comm.rank() == 2) {
      EXPECT_EQ(destination, std::vector<uint8_t>(4096, 0xBB)) << "an epoch-1 message was delivered";
    }
    ASSERT_TRUE(Barrier(world.store, "epoch2", 3, Deadline::AfterSeconds(20)).ok());
  });
}

// An abort on one rank reaches the others through the peer monitor within a few heartbeats, with
// its reason, instead of each waiting out its own deadline.
TEST(CommunicatorTest, AnAbortPropagatesToEveryRankNamingItsOrigin) {
  ThreadWorld world(3);
  world.Run([&](Communicator& comm) {
    ASSERT_TRUE(Barrier(world.store, "up", 3, Deadline::AfterSeconds(20)).ok());
    const auto started = std::chrono::steady_clock::now();
    if (comm.rank() == 1) comm.Abort(Unavailable("rank 1's executor lost its GPU"));
    while (!comm.aborted() && std::chrono::steady_clock::now() - started < std::chrono::seconds(5)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
    ASSERT_TRUE(comm.aborted());
    if (comm.rank() != 1) {
      EXPECT_NE(comm.abort_reason().ToString().find("rank 1 aborted: "), std::string::npos)
          << comm.abort_reason().ToString();
      EXPECT_NE(comm.abort_reason().ToString().find("lost its GPU"), std::string::npos);
    }
    ASSERT_TRUE(Barrier(world.store, "down", 3, Deadline::AfterSeconds(20)).ok());
  });
}

// Ranks waiting at a barrier for a rank that failed leave it with the failure, not at the deadline.
TEST(CommunicatorTest, ABarrierEndsWhenTheCommunicatorAborts) {
  ThreadWorld world(3);
  world.Run([&](Communicator& comm) {
    ASSERT_TRUE(Barrier(world.store, "up", 3, Deadline::AfterSeconds(20)).ok());
    if (comm.rank() == 1) {
      comm.Abort(Unavailable("rank 1 failed"));  // and never comes to the barrier
    } else {
      const auto started = std::chrono::steady_clock::now();
      Status waited = comm.Barrier("never", Deadline::AfterSeconds(20));
      EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
      EXPECT_NE(waited.ToString().find("rank 1 failed"), std::string::npos) << waited.ToString();
    }
    ASSERT_TRUE(Barrier(world.store, "down", 3, Deadline::AfterSeconds(20)).ok());
  });
}

// The abort ends the barrier's store wait itself, within milliseconds, not at the end of some
// shorter wait the barrier is cut into: rank 0 waits at a barrier (30 s deadline) that the others
// never reach, and 10 ms later another thread of rank 0 aborts its communicator.
TEST(CommunicatorTest, AnAbortEndsABarrierWithinMilliseconds) {
  ThreadWorld world(3);
  world.Run([&](Communicator& comm) {
    ASSERT_TRUE(Barrier(world.store, "up", 3, Deadline::AfterSeconds(20)).ok());
    if (comm.rank() == 0) {
      std::atomic<int64_t> aborted_ns{0};
      std::thread aborter([&] {
        ASSERT_TRUE(world.store.WaitAtLeast("barrier/never", 1, Deadline::AfterSeconds(20)).ok());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // rank 0 is in its wait
        aborted_ns = std::chrono::steady_clock::now().time_since_epoch().count();
        comm.Abort(Unavailable("rank 1 died (test)"));
      });
      Status waited = comm.Barrier("never", Deadline::AfterSeconds(30));
      const int64_t returned_ns = std::chrono::steady_clock::now().time_since_epoch().count();
      aborter.join();
      const double ms = static_cast<double>(returned_ns - aborted_ns.load()) / 1e6;
      std::printf("barrier ended %.2f ms after the abort\n", ms);
      EXPECT_LT(ms, 40.0);
      EXPECT_NE(waited.ToString().find("rank 1 died (test)"), std::string::npos) << waited.ToString();
    }
    ASSERT_TRUE(Barrier(world.store, "down", 3, Deadline::AfterSeconds(20)).ok());
  });
}

TEST(CommunicatorTest, RunsAPlanOverLocalWithinANodeAndTcpAcross) {
  ThreadWorld world(3);
  // Rank 0 sends 3 MiB to rank 1 (local) and to rank 2 (tcp), and to itself (same-rank local).
  const int64_t bytes = 3 << 20;
  TransferPlan plan;
  plan.num_ranks = 3;
  plan.source_buffers = {{0, "s", bytes}};
  plan.destination_buffers = {{0, "d0", bytes}, {1, "d1", bytes}, {2, "d2", bytes}};
  for (int peer = 0; peer < 3; ++peer) {
    Op send;
    send.kind = OpKind::kSend;
    send.rank = 0;
    send.peer = peer;
    send.message = 100 + peer;
    send.bytes = bytes;
    send.SetData(ByteRange(Space::kSource, 0, 0, bytes));
    plan.AddOp(send);
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.rank = peer;
    recv.peer = 0;
    recv.SetData(ByteRange(Space::kDestination, peer, 0, bytes));
    plan.AddOp(recv);
  }
  world.Run([&](Communicator& comm) {
    std::vector<uint8_t> source(bytes), destination(bytes, 0);
    for (int64_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>(i * 131 + 7);
    RankMemory memory;
    memory.source = {{source.data(), bytes, MemoryKind::kHost, -1}};
    memory.destination.assign(3, MemoryDesc{});
    memory.destination[comm.rank()] = {destination.data(), bytes, MemoryKind::kHost, -1};
    auto executor = Executor::Create(comm);
    ASSERT_TRUE(executor.ok());
    for (int refit = 0; refit < 5; ++refit) {
      std::fill(destination.begin(), destination.end(), 0);
      auto stats = (*executor)->Run(plan, memory, Deadline::AfterSeconds(20));
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_EQ(destination, source);
    }
    ASSERT_TRUE(Barrier(world.store, "done", 3, Deadline::AfterSeconds(20)).ok());
  });
}

// Wraps the local transport and counts registrations, to observe the executor's cache.
std::atomic<int> registered{0}, deregistered{0};
class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return "counting"; }
  TransportCapabilities capabilities() const override { return inner_->capabilities(); }
  Result<Bytes> LocalEndpointInfo() override { return inner_->LocalEndpointInfo(); }
  Status Connect(int peer, std::span<const uint8_t> info, Deadline d) override {
    return inner_->Connect(peer, info, d);
  }
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& m) override {
    ++registered;
    return inner_->RegisterMemory(m);
  }
  Status DeregisterMemory(MemoryHandle h) override {
    ++deregistered;
    return inner_->DeregisterMemory(h);
  }
  Result<Bytes> RemoteKey(MemoryHandle h) override { return inner_->RemoteKey(h); }
  Result<RequestId> PostSend(int p, uint64_t t, const LocalBuffer& b) override { return inner_->PostSend(p, t, b); }
  Result<RequestId> PostRecv(int p, uint64_t t, const LocalBuffer& b) override { return inner_->PostRecv(p, t, b); }
  Result<RequestId> PostPut(int p, uint64_t t, const LocalBuffer& l, const RemoteBuffer& r) override {
    return inner_->PostPut(p, t, l, r);
  }
  Result<RequestId> PostRecvNotify(int p, uint64_t t) override { return inner_->PostRecvNotify(p, t); }
  Result<int> Poll(std::span<Completion> out, Deadline d) override { return inner_->Poll(out, d); }
  Status Cancel(RequestId r) override { return inner_->Cancel(r); }
  void Abort(const Status& reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Transport> inner_;
};

TEST(CommunicatorTest, ExecutorKeepsRegistrationsAcrossRefitsUntilForgotten) {
  TransportRegistry registry;
  ASSERT_TRUE(registry
                  .Register({"counting", "local, counted", {},
                             [](const TransportContext& c) -> Result<std::unique_ptr<Transport>> {
                               FERRY_ASSIGN_OR_RETURN(auto inner, CreateLocalTransport(c));
                               return std::unique_ptr<Transport>(new CountingTransport(std::move(inner)));
                             }})
                  .ok());
  InMemoryStore store;
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("transport.same_rank", "counting").ok());
  CommunicatorOptions options;
  options.store = &store;
  options.config = &config;
  options.registry = &registry;
  auto comm = Communicator::Create(options, Deadline::AfterSeconds(10));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  TransferPlan plan;
  plan.num_ranks = 1;
  plan.source_buffers = {{0, "s", 4096}};
  plan.destination_buffers = {{0, "d", 4096}};
  Op send;
  send.kind = OpKind::kSend;
  send.peer = 0;
  send.message = 1;
  send.bytes = 4096;
  send.SetData(ByteRange(Space::kSource, 0, 0, 4096));
  plan.AddOp(send);
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.SetData(ByteRange(Space::kDestination, 0, 0, 4096));
  plan.AddOp(recv);
  std::vector<uint8_t> a(4096, 9), b(4096, 0);
  RankMemory memory{{{a.data(), 4096, MemoryKind::kHost, -1}}, {{b.data(), 4096, MemoryKind::kHost, -1}}};
  auto executor = Executor::Create(**comm);
  ASSERT_TRUE(executor.ok());
  registered = deregistered = 0;
  for (int refit = 0; refit < 10; ++refit) {
    ASSERT_TRUE((*executor)->Run(plan, memory, Deadline::AfterSeconds(10)).ok());
  }
  EXPECT_EQ(b, a);
  EXPECT_EQ(registered.load(), 2) << "source and destination registered once for ten refits";
  EXPECT_EQ(deregistered.load(), 0);
  (*executor)->ForgetRegistrations();
  EXPECT_EQ(deregistered.load(), 2);
  ASSERT_TRUE(config.Set("executor.cache_registrations", "false").ok());
  auto uncached = Executor::Create(**comm);
  ASSERT_TRUE(uncached.ok());
  ASSERT_TRUE((*uncached)->Run(plan, memory, Deadline::AfterSeconds(10)).ok());
  EXPECT_EQ(registered.load(), 4);
  EXPECT_EQ(deregistered.load(), 4);
}

int OpenFileDescriptors() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                        std::filesystem::directory_iterator()));
}

TEST(CommunicatorTest, TwoHundredRefitsLeaveFileDescriptorsFlat) {
  ThreadWorld world(3);
  TransferPlan plan = OneMessage(64 << 10);
  std::atomic<int> before{0}, after{0};
  world.Run([&](Communicator& comm) {
    std::vector<uint8_t> source(64 << 10, 0x5A), destination(64 << 10, 0);
    RankMemory memory;
    memory.source = {{source.data(), 64 << 10, MemoryKind::kHost, -1}};
    memory.destination = {{destination.data(), 64 << 10, MemoryKind::kHost, -1}};
    auto executor = Executor::Create(comm);
    ASSERT_TRUE(executor.ok());
    ASSERT_TRUE((*executor)->Run(plan, memory, Deadline::AfterSeconds(20)).ok());
    ASSERT_TRUE(Barrier(world.store, "warm", 3, Deadline::AfterSeconds(20)).ok());
    if (comm.rank() == 0) before = OpenFileDescriptors();
    for (int refit = 0; refit < 200; ++refit) {
      auto stats = (*executor)->Run(plan, memory, Deadline::AfterSeconds(20));
      ASSERT_TRUE(stats.ok()) << "refit " << refit << ": " << stats.status().ToString();
    }
    ASSERT_TRUE(Barrier(world.store, "refits", 3, Deadline::AfterSeconds(20)).ok());
    if (comm.rank() == 0) after = OpenFileDescriptors();
    if (comm.rank() == 2) {
      EXPECT_EQ(destination, source);
    }
    ASSERT_TRUE(Barrier(world.store, "counted", 3, Deadline::AfterSeconds(20)).ok());
  });
  EXPECT_EQ(before.load(), after.load());
}

}  // namespace
}  // namespace ferry
