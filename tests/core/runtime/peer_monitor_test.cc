// PeerMonitor: a peer that dies, one that stops (never beats), one that announces an abort, and
// one that leaves in order — each seen within its bound and reported naming that peer.
#include "core/runtime/peer_monitor.h"

#include <gtest/gtest.h>

#include <atomic>

#include <future>
#include <thread>

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0 runs a PeerMonitor; rank 1 is a bare PeerWatch the test drives (it never heartbeats
// unless told to).
struct Pair {
  Pair() {
    // A communicator of 8 of which only ranks 0 and 1 take part (rank numbers up to 7 are valid).
    PeerMonitorOptions o{0, 8, 3, "secret", "127.0.0.1", 0.05, 0.5, 0.5};
    monitor = std::make_unique<PeerMonitor>(o, [this](const Status& why, int lost_rank) {
      lost = lost_rank;
      failure.set_value(why);
    });
    peer = std::make_unique<PeerWatch>(1, 8, 3, "secret");
    EXPECT_TRUE(monitor->Listen().ok());
    EXPECT_TRUE(peer->Listen("127.0.0.1").ok());
    std::thread accept([&] {
      EXPECT_TRUE(peer->Connect(0, monitor->host(), monitor->port(), Deadline::AfterSeconds(5)).ok());
    });
    EXPECT_TRUE(monitor->Connect(1, peer->host(), peer->port(), Deadline::AfterSeconds(5)).ok());
    accept.join();
    monitor->Start();
    started = Clock::now();
  }
  // The failure reported, and how long after `since` it came; fails the test after 5 s.
  Status Await(Clock::time_point since, double* seconds) {
    auto future = failure.get_future();
    if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      return DeadlineExceeded("no failure reported");
    }
    *seconds = std::chrono::duration<double>(Clock::now() - since).count();
    return future.get();
  }
  std::promise<Status> failure;
  std::atomic<int> lost{-2};  // the lost rank reported with the failure
  std::unique_ptr<PeerMonitor> monitor;
  std::unique_ptr<PeerWatch> peer;
  Clock::time_point started;
};

TEST(PeerMonitorTest, AClosedConnectionNamesTheDeadRankAtOnce) {
  Pair pair;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto died = Clock::now();
  pair.peer.reset();  // closes without a goodbye, as a killed process does
  double seconds = 0;
  Status why = pair.Await(died, &seconds);
  EXPECT_EQ(why.code(), StatusCode::kUnavailable) << why.ToString();
  EXPECT_NE(why.ToString().find("rank 1 died"), std::string::npos) << why.ToString();
  EXPECT_LT(seconds, 0.4);
}

TEST(PeerMonitorTest, ASilentPeerIsDeclaredHungAfterPeerDead) {
  Pair pair;  // the bare watch never heartbeats: a stopped process
  double seconds = 0;
  Status why = pair.Await(pair.started, &seconds);
  EXPECT_NE(why.ToString().find("rank 1 sent no heartbeat"), std::string::npos) << why.ToString();
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 1.5);
}

// A peer that heartbeats and then stops (heartbeat 50 ms, peer_dead 0.5 s) is reported within
// peer_dead - heartbeat of its last heartbeat, so that the rank aborts within peer_dead of the stop.
TEST(PeerMonitorTest, AStopIsReportedWithinPeerDeadNotAfterIt) {
  Pair pair;
  Clock::time_point last_beat;
  for (int i = 0; i < 12; ++i) {  // past first_beat_s: the stop limit applies
    pair.peer->SendHeartbeat();
    last_beat = Clock::now();
    (void)pair.peer->Poll(50);
  }
  double seconds = 0;
  Status why = pair.Await(last_beat, &seconds);
  EXPECT_NE(why.ToString().find("rank 1 sent no heartbeat"), std::string::npos) << why.ToString();
  EXPECT_GE(seconds, 0.5 - 2 * 0.05 - 0.02);
  EXPECT_LT(seconds, 0.5 - 0.05);
  EXPECT_EQ(pair.lost, 1);
}

// The reason and the lost rank travel with the abort: a rank that hears of rank 7's death from a
// peer knows rank 7's process is gone (a store it hosted too).
TEST(PeerMonitorTest, AnAnnouncedAbortCarriesItsReasonAndLostRank) {
  Pair pair;
  pair.peer->SendAbort("rank 7 died or closed its connection", 7);
  double seconds = 0;
  Status why = pair.Await(pair.started, &seconds);
  EXPECT_EQ(why.code(), StatusCode::kAborted);
  EXPECT_NE(why.ToString().find("rank 1 aborted: rank 7 died"), std::string::npos)
      << why.ToString();
  EXPECT_EQ(pair.lost, 7);
}

TEST(PeerMonitorTest, AGoodbyeIsNotAFailureAndAnnounceReachesThePeer) {
  Pair pair;
  pair.monitor->Announce(Aborted("executor failed"));
  std::string reason;
  const Deadline deadline = Deadline::AfterSeconds(5);
  while (reason.empty() && !deadline.Expired()) {
    for (const auto& event : pair.peer->Poll(50)) {
      if (event.kind == PeerWatch::Event::kAbort) reason = event.reason;
    }
  }
  EXPECT_NE(reason.find("executor failed"), std::string::npos) << reason;
  pair.peer->SendBye();
  pair.peer.reset();
  auto future = pair.failure.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(800)), std::future_status::timeout);
}

}  // namespace
}  // namespace ferry
