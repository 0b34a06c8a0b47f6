// PeerWatch: the dial/accept handshake in either order, refusal of other epochs, and close
// detection — in one process, two watches standing for two ranks.
#include "transports/libfabric/peer_watch.h"

#include <thread>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(PeerWatchTest, DetectsPeerGoneWhicheverSideConnectsFirst) {
  PeerWatch low(0, 7);
  auto high = std::make_unique<PeerWatch>(1, 7);
  ASSERT_TRUE(low.Listen("127.0.0.1").ok());
  ASSERT_TRUE(high->Listen("127.0.0.1").ok());
  // The accepting side (higher rank) calls first; the dialer follows from another thread.
  std::thread dialer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(low.Connect(1, high->host(), high->port(), Deadline::AfterSeconds(5)).ok());
  });
  Status accepted = high->Connect(0, low.host(), low.port(), Deadline::AfterSeconds(5));
  dialer.join();
  ASSERT_TRUE(accepted.ok()) << accepted.ToString();
  EXPECT_TRUE(low.PollGone().empty());
  high.reset();  // rank 1 "dies"
  std::vector<int> gone;
  const Deadline deadline = Deadline::AfterSeconds(5);
  while (gone.empty() && !deadline.Expired()) gone = low.PollGone();
  ASSERT_EQ(gone, std::vector<int>{1});
  EXPECT_TRUE(low.PollGone().empty());  // reported once
}

TEST(PeerWatchTest, RefusesAnotherEpoch) {
  PeerWatch stranger(0, 6);
  PeerWatch high(1, 7);
  ASSERT_TRUE(stranger.Listen("127.0.0.1").ok());
  ASSERT_TRUE(high.Listen("127.0.0.1").ok());
  ASSERT_TRUE(stranger.Connect(1, high.host(), high.port(), Deadline::AfterSeconds(5)).ok());
  Status status = high.Connect(0, stranger.host(), stranger.port(), Deadline::AfterSeconds(0.5));
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
}

}  // namespace
}  // namespace ferry
