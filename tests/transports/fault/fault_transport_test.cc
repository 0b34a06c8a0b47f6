// The fault transport: the conformance suite over tcp with no fault (it forwards faithfully), its
// option checks, and each action on two ranks in this process (error, drop, delay, hang, and an
// Abort that never returns).
#include "transports/fault/fault_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(FaultOverTcp, TransportConformanceTest,
                         ::testing::Values(ConformanceParams::For(
                             "fault", {{"fault.inner", "tcp"}, {"tcp.address", "127.0.0.1"}})),
                         ConformanceParamsName);

namespace {

using fault::FaultAction;
using fault::FaultOp;
using fault::FaultSpec;
using Clock = std::chrono::steady_clock;

Result<FaultSpec> SpecOf(const std::map<std::string, std::string>& options) {
  Config config = RuntimeConfig();
  for (const auto& [name, value] : options) FERRY_RETURN_IF_ERROR(config.Set(name, value));
  TransportContext context;
  context.config = &config;
  context.size = 4;
  return fault::FaultSpecFromContext(context);
}

TEST(FaultSpecTest, ReadsTheOptionsAndCountsHits) {
  auto spec = SpecOf({{"fault.rank", "1"}, {"fault.op", "recv"}, {"fault.action", "error"},
                      {"fault.after", "2"}, {"fault.count", "2"}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->inner, "tcp");
  EXPECT_FALSE(spec->Hits(FaultOp::kRecv, 1, 1));  // the first two calls pass
  EXPECT_TRUE(spec->Hits(FaultOp::kRecv, 1, 2));
  EXPECT_TRUE(spec->Hits(FaultOp::kRecv, 1, 3));
  EXPECT_FALSE(spec->Hits(FaultOp::kRecv, 1, 4));  // count 2: then it stops
  EXPECT_FALSE(spec->Hits(FaultOp::kRecv, 0, 2));  // another rank
  EXPECT_FALSE(spec->Hits(FaultOp::kSend, 1, 2));  // another op
}

TEST(FaultSpecTest, RefusesFaultsThatMeanNothingNamingTheOptions) {
  auto drop_connect = SpecOf({{"fault.op", "connect"}, {"fault.action", "drop"}});
  EXPECT_NE(drop_connect.status().message().find("fault.action=drop with fault.op=connect"), std::string::npos);
  auto error_abort = SpecOf({{"fault.op", "abort"}, {"fault.action", "error"}});
  EXPECT_EQ(error_abort.status().code(), StatusCode::kInvalidArgument);
  auto peer_poll = SpecOf({{"fault.op", "poll"}, {"fault.peer", "1"}});
  EXPECT_NE(peer_poll.status().message().find("fault.peer=1"), std::string::npos);
  auto itself = SpecOf({{"fault.inner", "fault"}});
  EXPECT_NE(itself.status().message().find("fault.inner='fault'"), std::string::npos);
  auto unknown = SpecOf({{"fault.action", "explode"}});
  EXPECT_NE(unknown.status().message().find("explode"), std::string::npos);
}

// A fault on a rank or peer the communicator does not have would never fire: refused, naming the
// ranks there are.
TEST(FaultSpecTest, RefusesRanksAndPeersPastTheCommunicator) {
  auto rank = SpecOf({{"fault.rank", "4"}, {"fault.op", "send"}, {"fault.action", "drop"}});
  EXPECT_NE(rank.status().message().find("fault.rank=4 is not a rank of this 4-rank communicator: give -1 or a rank in [0, 4)"),
            std::string::npos)
      << rank.status().ToString();
  auto peer = SpecOf({{"fault.peer", "9"}, {"fault.op", "send"}, {"fault.action", "drop"}});
  EXPECT_NE(peer.status().message().find("fault.peer=9"), std::string::npos) << peer.status().ToString();
  EXPECT_TRUE(SpecOf({{"fault.rank", "3"}, {"fault.peer", "0"}, {"fault.op", "send"}}).ok());
}

// Two fault-over-tcp ranks with `options`, and a 64 KiB buffer registered on each.
struct Pair {
  explicit Pair(std::map<std::string, std::string> options) {
    options["fault.inner"] = "tcp";
    options["tcp.address"] = "127.0.0.1";
    auto created = CreateTransportWorld(ConformanceParams::For("fault", options), 2, Deadline::AfterSeconds(20));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return;
    world = std::move(*created);
    for (int rank = 0; rank < 2; ++rank) handle[rank] = MustRegister(*world.ranks[rank], buffer[rank]);
  }
  LocalBuffer All(int rank) { return LocalBuffer{handle[rank], 0, static_cast<int64_t>(buffer[rank].size())}; }
  TransportWorld world;
  std::vector<uint8_t> buffer[2] = {std::vector<uint8_t>(65536, 7), std::vector<uint8_t>(65536, 0)};
  MemoryHandle handle[2];
};

TEST(FaultTransportTest, AnErrorHitsTheChosenCallAndNamesRankAndCall) {
  Pair pair({{"fault.rank", "0"}, {"fault.op", "send"}, {"fault.action", "error"}, {"fault.after", "1"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  Driver driver(pair.world);
  auto recv = pair.world.ranks[1]->PostRecv(0, 5, pair.All(1));
  auto first = pair.world.ranks[0]->PostSend(1, 5, pair.All(0));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(driver.WaitAll({{0, *first}, {1, *recv}}, Deadline::AfterSeconds(10)).ok());
  auto second = pair.world.ranks[0]->PostSend(1, 6, pair.All(0));
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("rank 0: send call 2"), std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(pair.world.ranks[0]->PostSend(1, 7, pair.All(0)).ok()) << "fault.count=1 hits one call";
}

TEST(FaultTransportTest, ADroppedSendCompletesButNeverArrives) {
  Pair pair({{"fault.rank", "0"}, {"fault.op", "send"}, {"fault.action", "drop"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  Driver driver(pair.world);
  auto recv = pair.world.ranks[1]->PostRecv(0, 5, pair.All(1));
  auto send = pair.world.ranks[0]->PostSend(1, 5, pair.All(0));
  ASSERT_TRUE(send.ok() && recv.ok());
  EXPECT_NE(*send & fault::kFaultRequestBit, 0u);
  auto sent = driver.Wait(0, *send, Deadline::AfterSeconds(5));
  ASSERT_TRUE(sent.ok() && sent->status.ok());
  EXPECT_EQ(sent->bytes, 65536);
  auto received = driver.Wait(1, *recv, Deadline::AfterSeconds(0.3));
  EXPECT_EQ(received.status().code(), StatusCode::kDeadlineExceeded) << "the dropped message arrived";
  EXPECT_EQ(pair.buffer[1][0], 0);
}

TEST(FaultTransportTest, ADroppedReceiveCompletesAbortedAfterAbort) {
  Pair pair({{"fault.rank", "1"}, {"fault.op", "recv"}, {"fault.action", "drop"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  auto recv = pair.world.ranks[1]->PostRecv(0, 5, pair.All(1));
  ASSERT_TRUE(recv.ok());
  Completion out[4];
  auto none = pair.world.ranks[1]->Poll(out, Deadline::AfterSeconds(0.1));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  pair.world.ranks[1]->Abort(Unavailable("test over"));
  auto got = pair.world.ranks[1]->Poll(out, Deadline::AfterSeconds(1));
  ASSERT_TRUE(got.ok() && *got >= 1);
  EXPECT_EQ(out[0].request, *recv);
  EXPECT_EQ(out[0].status.code(), StatusCode::kAborted);
}

TEST(FaultTransportTest, ADelayHoldsTheCallThenForwardsIt) {
  Pair pair({{"fault.rank", "0"}, {"fault.op", "send"}, {"fault.action", "delay"}, {"fault.delay", "200ms"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  Driver driver(pair.world);
  auto recv = pair.world.ranks[1]->PostRecv(0, 5, pair.All(1));
  const auto started = Clock::now();
  auto send = pair.world.ranks[0]->PostSend(1, 5, pair.All(0));
  EXPECT_GE(Clock::now() - started, std::chrono::milliseconds(200));
  ASSERT_TRUE(send.ok() && recv.ok());
  ASSERT_TRUE(driver.WaitAll({{0, *send}, {1, *recv}}, Deadline::AfterSeconds(10)).ok());
  EXPECT_EQ(pair.buffer[1], pair.buffer[0]);
}

TEST(FaultTransportTest, AHungPollReturnsAbortedWhenAborted) {
  Pair pair({{"fault.rank", "0"}, {"fault.op", "poll"}, {"fault.action", "hang"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  Transport* hung = pair.world.ranks[0].get();
  std::atomic<bool> returned{false};
  Status polled;
  std::thread poller([&] {
    Completion out[4];
    polled = hung->Poll(out, Deadline::After(std::chrono::nanoseconds(0))).status();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned) << "a hung poll returned before the abort";
  const auto aborted = Clock::now();
  hung->Abort(Unavailable("peer 1 died"));
  poller.join();
  EXPECT_LT(Clock::now() - aborted, std::chrono::milliseconds(200));
  EXPECT_EQ(polled.code(), StatusCode::kAborted);
  EXPECT_NE(polled.message().find("hung rank 0: poll call 1"), std::string::npos) << polled.ToString();
  EXPECT_NE(polled.message().find("peer 1 died"), std::string::npos) << polled.ToString();
}

TEST(FaultTransportTest, AHungAbortNeverReturns) {
  Pair pair({{"fault.rank", "0"}, {"fault.op", "abort"}, {"fault.action", "hang"}});
  ASSERT_EQ(pair.world.ranks.size(), 2u);
  auto returned = std::make_shared<std::atomic<bool>>(false);
  Transport* hung = pair.world.ranks[0].release();  // quarantined: the hung thread keeps using it
  std::thread([hung, returned] {
    hung->Abort(Unavailable("give up"));
    *returned = true;
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(*returned);
  pair.world.ranks[1]->Abort(Unavailable("give up"));  // the other rank's Abort is untouched
}

}  // namespace
}  // namespace ferry::testing
