// PeerWatch: the dial/accept handshake in either order, refusal of other epochs and of strangers
// without the secret, and close detection — in one process, watches standing for ranks.
#include "core/runtime/peer_watch.h"

#include <thread>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(PeerWatchTest, DetectsPeerGoneWhicheverSideConnectsFirst) {
  PeerWatch low(0, 2, 7, "s");
  auto high = std::make_unique<PeerWatch>(1, 2, 7, "s");
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

// A watch of another epoch (its secret differs too) and one holding a guessed secret dial rank 1
// as rank 0: both are refused, and rank 1 never takes them for rank 0.
TEST(PeerWatchTest, RefusesAnotherEpochAndAWrongSecret) {
  PeerWatch other_epoch(0, 2, 6, "secret of epoch 6");
  PeerWatch guessed(0, 2, 7, "guess");
  PeerWatch high(1, 2, 7, "secret of epoch 7");
  ASSERT_TRUE(other_epoch.Listen("127.0.0.1").ok());
  ASSERT_TRUE(guessed.Listen("127.0.0.1").ok());
  ASSERT_TRUE(high.Listen("127.0.0.1").ok());
  Status dialed[2];
  std::thread a([&] { dialed[0] = other_epoch.Connect(1, high.host(), high.port(), Deadline::AfterSeconds(2)); });
  std::thread b([&] { dialed[1] = guessed.Connect(1, high.host(), high.port(), Deadline::AfterSeconds(2)); });
  Status status = high.Connect(0, "127.0.0.1", 1, Deadline::AfterSeconds(1));
  a.join();
  b.join();
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_FALSE(dialed[0].ok());
  EXPECT_FALSE(dialed[1].ok());
  EXPECT_FALSE(PeerWatch(0, 2, 7, "").Listen("127.0.0.1").ok()) << "a watch needs a secret";
}

}  // namespace
}  // namespace ferry
