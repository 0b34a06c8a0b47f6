// The multi-process transport scenarios (see process_suite_testutil.h). Each test forks its ranks
// through RunRanks, which kills them at the test's deadline.
#include "tests/transports/ucx/process_suite_testutil.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ferry::testing {
namespace {

constexpr double kTimeoutSeconds = 90;

// A registered host block owned by the scenario.
struct Block {
  std::vector<uint8_t> bytes;
  MemoryHandle handle;
  LocalBuffer All() const { return LocalBuffer{handle, 0, static_cast<int64_t>(bytes.size())}; }
};

Result<Block> MakeBlock(Transport& transport, size_t size) {
  Block block;
  block.bytes.resize(size);
  FERRY_ASSIGN_OR_RETURN(block.handle,
                         transport.RegisterMemory(MemoryDesc{block.bytes.data(),
                                                             static_cast<int64_t>(size),
                                                             MemoryKind::kHost, -1}));
  return block;
}

Status Expect(bool condition, const std::string& what) {
  return condition ? Status::Ok() : Internal("expectation failed: " + what);
}

Status ExpectCode(const Status& status, StatusCode code, const std::string& what) {
  if (status.code() == code) return Status::Ok();
  return Internal(what + ": expected " + std::string(StatusCodeName(code)) + ", got " +
                  status.ToString());
}

TransportCapabilities ProbeCapabilities(const TransportUnderTest& under_test) {
  auto config = MakeConfig(under_test);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  TransportContext context;
  context.secret = "transport-test-secret";
  context.config = &*config;
  auto transport = TransportRegistry::Default().Create(under_test.name, context);
  EXPECT_TRUE(transport.ok()) << transport.status().ToString();
  return transport.ok() ? (*transport)->capabilities() : TransportCapabilities{};
}

}  // namespace

std::string TransportLabel(const ::testing::TestParamInfo<TransportUnderTest>& info) {
  return info.param.label;
}

// Every size from empty to 256 MiB arrives intact, in both directions.
TEST_P(TransportProcessTest, SizesFromZeroTo256MiB) {
  const std::vector<size_t> sizes = {0,       1,         7,          4096,      8192 + 3,
                                     65537,   1 << 20,   (4 << 20) + 5, 256u << 20};
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    const int peer = 1 - env.rank;
    for (size_t i = 0; i < sizes.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(Block out, MakeBlock(t, sizes[i]));
      FERRY_ASSIGN_OR_RETURN(Block in, MakeBlock(t, sizes[i]));
      FillPattern(out.bytes.data(), sizes[i], 1000 * env.rank + i);
      FERRY_ASSIGN_OR_RETURN(RequestId recv, t.PostRecv(peer, 100 + i, in.All()));
      FERRY_ASSIGN_OR_RETURN(RequestId send, t.PostSend(peer, 100 + i, out.All()));
      FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {recv, send}, Deadline::AfterSeconds(60)));
      FERRY_RETURN_IF_ERROR(done[send].status.WithContext("send of " + std::to_string(sizes[i])));
      FERRY_RETURN_IF_ERROR(done[recv].status.WithContext("recv of " + std::to_string(sizes[i])));
      FERRY_RETURN_IF_ERROR(Expect(done[recv].bytes == static_cast<int64_t>(sizes[i]),
                                   "received byte count " + std::to_string(done[recv].bytes) +
                                       " == " + std::to_string(sizes[i])));
      FERRY_RETURN_IF_ERROR(CheckPattern(in.bytes.data(), sizes[i], 1000 * peer + i));
      FERRY_RETURN_IF_ERROR(t.DeregisterMemory(out.handle));
      FERRY_RETURN_IF_ERROR(t.DeregisterMemory(in.handle));
    }
    return Status::Ok();
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// 300 messages of mixed sizes in flight between 3 ranks at once; half the receives are posted
// before the sends, half after (unexpected messages); completions are awaited in reverse order.
TEST_P(TransportProcessTest, ManyInFlightCompleteOutOfOrder) {
  constexpr int kMessages = 100;
  auto size_of = [](int i) -> size_t { return i % 7 == 0 ? 0 : (static_cast<size_t>(i) * 7919) % 300000; };
  Status status = RunRanks(3, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    size_t total = 0;
    for (int i = 0; i < kMessages; ++i) total += size_of(i);
    std::vector<Block> in(env.size);
    FERRY_ASSIGN_OR_RETURN(Block out, MakeBlock(t, total));
    for (int peer = 0; peer < env.size; ++peer) {
      FERRY_ASSIGN_OR_RETURN(in[peer], MakeBlock(t, total));
    }
    std::vector<RequestId> recvs;
    std::vector<std::pair<int, int>> recv_of;  // (peer, message)
    auto post_recvs = [&](int first, int last) -> Status {
      for (int peer = 0; peer < env.size; ++peer) {
        size_t offset = 0;
        for (int i = 0; i < kMessages; ++i) {
          if (i >= first && i < last) {
            FERRY_ASSIGN_OR_RETURN(
                RequestId id,
                t.PostRecv(peer, 5000 + i,
                           LocalBuffer{in[peer].handle, static_cast<int64_t>(offset),
                                       static_cast<int64_t>(size_of(i))}));
            recvs.push_back(id);
            recv_of.emplace_back(peer, i);
          }
          offset += size_of(i);
        }
      }
      return Status::Ok();
    };
    FERRY_RETURN_IF_ERROR(post_recvs(kMessages / 2, kMessages));  // expected
    FERRY_RETURN_IF_ERROR(Barrier(*env.store, "t/recvs-posted", env.size, Deadline::AfterSeconds(30)));
    std::vector<RequestId> sends;
    for (int peer = 0; peer < env.size; ++peer) {
      size_t offset = 0;
      for (int i = 0; i < kMessages; ++i) {
        FillPattern(out.bytes.data() + offset, size_of(i), 77 * i + 3);
        offset += size_of(i);
      }
      offset = 0;
      for (int i = 0; i < kMessages; ++i) {
        FERRY_ASSIGN_OR_RETURN(RequestId id,
                               t.PostSend(peer, 5000 + i,
                                          LocalBuffer{out.handle, static_cast<int64_t>(offset),
                                                      static_cast<int64_t>(size_of(i))}));
        sends.push_back(id);
        offset += size_of(i);
      }
    }
    // Let the early messages arrive before their receives exist (keeping any completions).
    std::map<RequestId, Completion> seen;
    const Deadline settle = Deadline::AfterSeconds(0.05);
    while (!settle.Expired()) {
      Completion scratch[16];
      FERRY_ASSIGN_OR_RETURN(int n, t.Poll(scratch, settle));
      for (int i = 0; i < n; ++i) seen[scratch[i].request] = scratch[i];
    }
    FERRY_RETURN_IF_ERROR(post_recvs(0, kMessages / 2));  // unexpected
    const Deadline deadline = Deadline::AfterSeconds(60);
    for (auto it = recvs.rbegin(); it != recvs.rend(); ++it) {
      FERRY_ASSIGN_OR_RETURN(Completion done, WaitFor(t, *it, seen, deadline));
      FERRY_RETURN_IF_ERROR(done.status);
    }
    for (RequestId id : sends) {
      FERRY_ASSIGN_OR_RETURN(Completion done, WaitFor(t, id, seen, deadline));
      FERRY_RETURN_IF_ERROR(done.status);
    }
    for (int peer = 0; peer < env.size; ++peer) {
      size_t offset = 0;
      for (int i = 0; i < kMessages; ++i) {
        FERRY_RETURN_IF_ERROR(CheckPattern(in[peer].bytes.data() + offset, size_of(i), 77 * i + 3)
                                  .WithContext("message " + std::to_string(i) + " from " +
                                               std::to_string(peer)));
        offset += size_of(i);
      }
    }
    return Status::Ok();
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// Messages with the same (peer, tag) match receives in posting order.
TEST_P(TransportProcessTest, SameTagMatchesInPostingOrder) {
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    constexpr int kCount = 6;
    constexpr size_t kBytes = 100000;
    FERRY_ASSIGN_OR_RETURN(Block block, MakeBlock(t, kBytes * kCount));
    std::vector<RequestId> ids;
    for (int i = 0; i < kCount; ++i) {
      const LocalBuffer part{block.handle, static_cast<int64_t>(i * kBytes), kBytes};
      if (env.rank == 0) {
        FillPattern(block.bytes.data() + i * kBytes, kBytes, 40 + i);
        FERRY_ASSIGN_OR_RETURN(RequestId id, t.PostSend(1, 9, part));
        ids.push_back(id);
      } else {
        FERRY_ASSIGN_OR_RETURN(RequestId id, t.PostRecv(0, 9, part));
        ids.push_back(id);
      }
    }
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, ids, Deadline::AfterSeconds(30)));
    for (auto& [id, completion] : done) FERRY_RETURN_IF_ERROR(completion.status);
    if (env.rank == 1) {
      for (int i = 0; i < kCount; ++i) {
        FERRY_RETURN_IF_ERROR(CheckPattern(block.bytes.data() + i * kBytes, kBytes, 40 + i)
                                  .WithContext("message " + std::to_string(i)));
      }
    }
    return Status::Ok();
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// A message larger than the receive buffer fails that receive with kOutOfRange; the transport
// keeps working afterwards.
TEST_P(TransportProcessTest, OversizedMessageFailsReceiveWithOutOfRange) {
  if (auto it = GetParam().known_defects.find("OversizedMessageFailsReceiveWithOutOfRange");
      it != GetParam().known_defects.end()) {
    GTEST_SKIP() << it->second;
  }
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    FERRY_ASSIGN_OR_RETURN(Block block, MakeBlock(t, 1 << 20));
    if (env.rank == 0) {
      FERRY_ASSIGN_OR_RETURN(RequestId big, t.PostSend(1, 1, block.All()));
      FERRY_ASSIGN_OR_RETURN(auto first, WaitAll(t, {big}, Deadline::AfterSeconds(30)));
      (void)first;  // the sender may see success or an error, depending on the protocol
      FillPattern(block.bytes.data(), 1000, 5);
      FERRY_ASSIGN_OR_RETURN(RequestId small, t.PostSend(1, 2, LocalBuffer{block.handle, 0, 1000}));
      FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {small}, Deadline::AfterSeconds(30)));
      return done[small].status;
    }
    FERRY_ASSIGN_OR_RETURN(RequestId recv, t.PostRecv(0, 1, LocalBuffer{block.handle, 0, 100}));
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {recv}, Deadline::AfterSeconds(30)));
    FERRY_RETURN_IF_ERROR(ExpectCode(done[recv].status, StatusCode::kOutOfRange, "oversized"));
    FERRY_ASSIGN_OR_RETURN(RequestId next, t.PostRecv(0, 2, LocalBuffer{block.handle, 0, 4096}));
    FERRY_ASSIGN_OR_RETURN(auto after, WaitAll(t, {next}, Deadline::AfterSeconds(30)));
    FERRY_RETURN_IF_ERROR(after[next].status);
    FERRY_RETURN_IF_ERROR(Expect(after[next].bytes == 1000, "1000 bytes after the oversize"));
    return CheckPattern(block.bytes.data(), 1000, 5);
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// One-sided: a put lands in the peer's registered memory before its notification completes.
TEST_P(TransportProcessTest, PutThenNotify) {
  if (!ProbeCapabilities(GetParam()).one_sided) GTEST_SKIP() << "transport is two-sided only";
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    constexpr size_t kBytes = 8 << 20;
    FERRY_ASSIGN_OR_RETURN(Block block, MakeBlock(t, kBytes));
    if (env.rank == 1) {
      FERRY_ASSIGN_OR_RETURN(Bytes key, t.RemoteKey(block.handle));
      FERRY_RETURN_IF_ERROR(env.store->Set("t/key", key, Deadline::AfterSeconds(10)));
      FERRY_ASSIGN_OR_RETURN(RequestId small, t.PostRecvNotify(0, 11));
      FERRY_ASSIGN_OR_RETURN(RequestId big, t.PostRecvNotify(0, 12));
      FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {small, big}, Deadline::AfterSeconds(30)));
      FERRY_RETURN_IF_ERROR(done[small].status);
      FERRY_RETURN_IF_ERROR(done[big].status);
      FERRY_RETURN_IF_ERROR(Expect(done[big].bytes == static_cast<int64_t>(kBytes - 64), "put size in notification"));
      FERRY_RETURN_IF_ERROR(CheckPattern(block.bytes.data(), 64, 8));
      return CheckPattern(block.bytes.data() + 64, kBytes - 64, 9);
    }
    FERRY_ASSIGN_OR_RETURN(Bytes key, env.store->Get("t/key", Deadline::AfterSeconds(10)));
    FillPattern(block.bytes.data(), 64, 8);
    FillPattern(block.bytes.data() + 64, kBytes - 64, 9);
    FERRY_ASSIGN_OR_RETURN(RequestId a, t.PostPut(1, 11, LocalBuffer{block.handle, 0, 64},
                                                  RemoteBuffer{key, 0}));
    FERRY_ASSIGN_OR_RETURN(RequestId b,
                           t.PostPut(1, 12, LocalBuffer{block.handle, 64, kBytes - 64},
                                     RemoteBuffer{key, 64}));
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {a, b}, Deadline::AfterSeconds(30)));
    FERRY_RETURN_IF_ERROR(done[a].status);
    return done[b].status;
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// A peer that exits without a goodbye: the survivor's pending receive and send fail with
// kUnavailable well before their deadline — never a hang.
TEST_P(TransportProcessTest, PeerExitFailsPendingRequests) {
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    if (env.rank == 1) _exit(0);  // dies holding its endpoints open
    env.skip_final_barrier = true;
    FERRY_ASSIGN_OR_RETURN(Block block, MakeBlock(t, 64 << 20));
    FERRY_ASSIGN_OR_RETURN(RequestId recv, t.PostRecv(1, 1, LocalBuffer{block.handle, 0, 1 << 20}));
    FERRY_ASSIGN_OR_RETURN(RequestId send, t.PostSend(1, 2, block.All()));
    const auto start = std::chrono::steady_clock::now();
    FERRY_ASSIGN_OR_RETURN(auto done, WaitAll(t, {recv, send}, Deadline::AfterSeconds(30)));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    FERRY_RETURN_IF_ERROR(ExpectCode(done[recv].status, StatusCode::kUnavailable, "recv"));
    FERRY_RETURN_IF_ERROR(ExpectCode(done[send].status, StatusCode::kUnavailable, "send"));
    FERRY_RETURN_IF_ERROR(Expect(seconds < 20, "failure noticed within 20 s, took " +
                                                   std::to_string(seconds)));
    // Later posts to the dead peer fail too.
    FERRY_ASSIGN_OR_RETURN(RequestId late, t.PostRecv(1, 3, LocalBuffer{block.handle, 0, 16}));
    FERRY_ASSIGN_OR_RETURN(auto after, WaitAll(t, {late}, Deadline::AfterSeconds(10)));
    return ExpectCode(after[late].status, StatusCode::kUnavailable, "post after death");
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// Abort from another thread ends a Poll that waits on a receive nobody will satisfy; the receive
// completes with kAborted, then Poll and new posts fail with kAborted.
TEST_P(TransportProcessTest, AbortFromAnotherThreadEndsPoll) {
  Status status = RunRanks(2, GetParam(), [&](RankEnv& env) -> Status {
    Transport& t = *env.transport;
    if (env.rank == 1) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(Block block, MakeBlock(t, 4096));
    FERRY_ASSIGN_OR_RETURN(RequestId recv, t.PostRecv(1, 77, block.All()));
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t.Abort(Aborted("test abort"));
    });
    const auto start = std::chrono::steady_clock::now();
    Completion out[4];
    auto polled = t.Poll(out, Deadline::AfterSeconds(20));
    aborter.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    FERRY_RETURN_IF_ERROR(Expect(seconds < 5, "Poll returned promptly after Abort"));
    FERRY_RETURN_IF_ERROR(polled.status());
    FERRY_RETURN_IF_ERROR(Expect(*polled == 1 && out[0].request == recv, "the receive reported"));
    FERRY_RETURN_IF_ERROR(ExpectCode(out[0].status, StatusCode::kAborted, "aborted receive"));
    FERRY_RETURN_IF_ERROR(ExpectCode(t.Poll(out, Deadline::AfterSeconds(0)).status(),
                                     StatusCode::kAborted, "Poll after abort"));
    return ExpectCode(t.PostSend(1, 1, block.All()).status(), StatusCode::kAborted,
                      "post after abort");
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// Endpoint info from another epoch (or another rank) is refused.
TEST_P(TransportProcessTest, ConnectRefusesOtherEpochAndWrongRank) {
  Status status = RunRanks(1, GetParam(), [&](RankEnv& env) -> Status {
    FERRY_ASSIGN_OR_RETURN(Config config, MakeConfig(GetParam()));
    TransportContext context;
    context.secret = "transport-test-secret";
    context.rank = 0;
    context.size = 2;
    context.epoch = 2;
    context.config = &config;
    FERRY_ASSIGN_OR_RETURN(auto other, TransportRegistry::Default().Create(GetParam().name, context));
    FERRY_ASSIGN_OR_RETURN(Bytes info, other->LocalEndpointInfo());
    FERRY_RETURN_IF_ERROR(ExpectCode(env.transport->Connect(0, info, Deadline::AfterSeconds(2)),
                                     StatusCode::kFailedPrecondition, "second connect to rank 0"));
    context.epoch = 1;
    context.rank = 1;
    FERRY_ASSIGN_OR_RETURN(auto fresh, TransportRegistry::Default().Create(GetParam().name, context));
    FERRY_RETURN_IF_ERROR(ExpectCode(fresh->Connect(1, info, Deadline::AfterSeconds(2)),
                                     StatusCode::kUnavailable, "connect across epochs"));
    Bytes garbage = {1, 2, 3};
    return ExpectCode(fresh->Connect(0, garbage, Deadline::AfterSeconds(2)),
                      StatusCode::kUnavailable, "connect with garbage info");
  }, kTimeoutSeconds);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

}  // namespace ferry::testing
