// AbortState: first reason wins, the abort status, one drain, and concurrent aborts.
#include "core/runtime/abort_state.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(AbortStateTest, NotAbortedIsOkAndNeverDrains) {
  AbortState state("tcp");
  EXPECT_FALSE(state.aborted());
  EXPECT_TRUE(state.status().ok());
  EXPECT_FALSE(state.TakeDrain());
}

TEST(AbortStateTest, FirstReasonWins) {
  AbortState state("tcp");
  EXPECT_TRUE(state.Abort(Unavailable("peer 3 died")));
  EXPECT_FALSE(state.Abort(Aborted("second reason")));
  EXPECT_TRUE(state.aborted());
  const Status status = state.status();
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_NE(status.message().find("tcp transport aborted"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("peer 3 died"), std::string::npos) << status.ToString();
  EXPECT_EQ(status.message().find("second reason"), std::string::npos) << status.ToString();
}

TEST(AbortStateTest, OkReasonReadsAsAbortRequested) {
  AbortState state("local");
  EXPECT_TRUE(state.Abort(Status::Ok()));
  EXPECT_EQ(state.status().code(), StatusCode::kAborted);
  EXPECT_NE(state.status().message().find("abort requested"), std::string::npos);
}

TEST(AbortStateTest, DrainsExactlyOnce) {
  AbortState state("ucx");
  state.Abort(Aborted("stop"));
  EXPECT_TRUE(state.TakeDrain());
  EXPECT_FALSE(state.TakeDrain());
  EXPECT_FALSE(state.TakeDrain());
  EXPECT_TRUE(state.aborted());
}

TEST(AbortStateTest, ConcurrentAbortsHaveOneWinnerAndOneDrain) {
  AbortState state("libfabric");
  std::atomic<int> winners{0}, drains{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (state.Abort(Aborted("thread " + std::to_string(i)))) ++winners;
      if (state.TakeDrain()) ++drains;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(drains.load(), 1);
  EXPECT_NE(state.status().message().find("thread "), std::string::npos);
}

}  // namespace
}  // namespace ferry
