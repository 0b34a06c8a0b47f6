// Completions after a peer's death: the receiver must survive a peer that dies right after
// sending a rendezvous-sized message, when the message's arrival and the endpoint's error are
// handled in one sweep of UCX progress. Before the fix, the error failed (and freed) the matched
// receive while its deferred rendezvous still pointed at it: a use after free that crashed
// survivors (issue 24's SIGSEGV) and that ASan reports (bazel test --config=asan).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

// The conformance suite is linked for its world helpers; ucx_conformance_test runs it.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);

namespace {

constexpr int64_t kLarge = 4 << 20;  // far above UCX's rendezvous threshold

TEST(UcxPeerDeathTest, AReceiveMatchedAsThePeerDiesCompletesOnceWithAnError) {
  for (int round = 0; round < 5; ++round) {
    auto world = CreateTransportWorld(
        ConformanceParams::For("ucx", {{"ucx.tls", "tcp"}, {"ucx.close_timeout", "100ms"}}), 2,
        Deadline::AfterSeconds(20));
    ASSERT_TRUE(world.ok()) << world.status().ToString();
    std::vector<uint8_t> source(kLarge, 0x5a), destination(kLarge, 0), small(64, 1), small_in(64, 0);
    Transport& sender = *world->ranks[0];
    Transport& receiver = *world->ranks[1];
    const MemoryHandle source_handle = MustRegister(sender, source);
    const MemoryHandle small_handle = MustRegister(sender, small);
    const MemoryHandle destination_handle = MustRegister(receiver, destination);
    const MemoryHandle small_in_handle = MustRegister(receiver, small_in);
    Driver driver(*world);
    // Wire the endpoints up with a small message first, so the large one leaves at once.
    auto hello_in = receiver.PostRecv(0, 1, LocalBuffer{small_in_handle, 0, 64});
    auto hello = sender.PostSend(1, 1, LocalBuffer{small_handle, 0, 64});
    ASSERT_TRUE(hello.ok() && hello_in.ok());
    ASSERT_TRUE(driver.WaitAll({{0, *hello}, {1, *hello_in}}, Deadline::AfterSeconds(10)).ok());
    auto recv = receiver.PostRecv(0, 2, LocalBuffer{destination_handle, 0, kLarge});
    auto send = sender.PostSend(1, 2, LocalBuffer{source_handle, 0, kLarge});
    ASSERT_TRUE(recv.ok() && send.ok());
    // The sender dies: its endpoints close by force, its rendezvous is never served.
    sender.Abort(Unavailable("rank 0 dies"));
    world->ranks[0].reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int completions = 0;
    Status seen;
    const Deadline deadline = Deadline::AfterSeconds(15);
    while (completions == 0 && !deadline.Expired()) {
      Completion out[8];
      auto got = receiver.Poll(out, Deadline::After(std::chrono::milliseconds(10)));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (int i = 0; i < *got; ++i) {
        if (out[i].request != *recv) continue;
        ++completions;
        seen = out[i].status;
      }
    }
    ASSERT_EQ(completions, 1) << "the receive from the dead peer never completed";
    // Either the data made it before the death, or the receive names the dead peer.
    if (!seen.ok()) {
      EXPECT_NE(seen.message().find("peer 0"), std::string::npos) << seen.ToString();
    }
    Completion out[8];
    auto later = receiver.Poll(out, Deadline::After(std::chrono::milliseconds(50)));
    ASSERT_TRUE(later.ok());
    for (int i = 0; i < *later; ++i) EXPECT_NE(out[i].request, *recv) << "completed twice";
  }
}

}  // namespace
}  // namespace ferry::testing
