// Stores: the in-memory store, and the TCP store's token check, waits and deadlines.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "core/runtime/socket_util.h"
#include "core/runtime/store.h"
#include "core/runtime/tcp_store.h"

namespace ferry {
namespace {

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(InMemoryStoreTest, GetWaitsForSetAndTimesOut) {
  InMemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(store.Set("k", B("v"), Deadline::AfterSeconds(1)).ok());
  });
  auto value = store.Get("k", Deadline::AfterSeconds(5));
  setter.join();
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, B("v"));
  auto missing = store.Get("never", Deadline::AfterSeconds(0.05));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(InMemoryStoreTest, BarrierAndClose) {
  InMemoryStore store;
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&] { ok += Barrier(store, "b", 4, Deadline::AfterSeconds(5)).ok(); });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(Barrier(store, "short", 2, Deadline::AfterSeconds(0.05)).code(),
            StatusCode::kDeadlineExceeded);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.Close();
  });
  EXPECT_EQ(store.Get("x", Deadline::AfterSeconds(10)).status().code(), StatusCode::kAborted);
  closer.join();
}

TEST(InMemoryStoreTest, FinalBarrierOfOneRankReturnsAtOnce) {
  InMemoryStore store;
  EXPECT_TRUE(FinalBarrier(store, "alone", 0, 1, 0, Deadline::AfterSeconds(5)).ok());
}

TEST(TcpStoreTest, ClientsWithTheTokenShareValuesAndCounters) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  int port = (*server)->port();
  auto a = TcpStoreClient::Connect("127.0.0.1", port, "s3cret", Deadline::AfterSeconds(5));
  auto b = TcpStoreClient::Connect("127.0.0.1", port, "s3cret", Deadline::AfterSeconds(5));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE((*a)->Set("ep/1", B("hello"), Deadline::AfterSeconds(5)).ok());
  });
  auto got = (*b)->Get("ep/1", Deadline::AfterSeconds(5));
  later.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, B("hello"));
  EXPECT_EQ(*(*a)->Add("n", 2, Deadline::AfterSeconds(5)), 2);
  EXPECT_EQ(*(*b)->Add("n", 3, Deadline::AfterSeconds(5)), 5);
  EXPECT_TRUE((*a)->WaitAtLeast("n", 5, Deadline::AfterSeconds(5)).ok());
  auto timeout = (*b)->Get("never", Deadline::AfterSeconds(0.1));
  EXPECT_EQ(timeout.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*server)->rejected(), 0);
}

TEST(TcpStoreTest, RejectsWrongOrMissingToken) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  auto wrong = TcpStoreClient::Connect("127.0.0.1", port, "guess", Deadline::AfterSeconds(5));
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(wrong.status().message().find("FERRY_TOKEN"), std::string::npos);
  // A raw connection that sends a request without any hello is dropped, never answered.
  auto raw = ConnectTcp("127.0.0.1", port, Deadline::AfterSeconds(5));
  ASSERT_TRUE(raw.ok());
  uint8_t junk[16] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 'k', 'e', 'y'};
  ASSERT_TRUE(WriteAll(*raw, junk, sizeof(junk), Deadline::AfterSeconds(5)).ok());
  uint8_t reply = 0;
  Status read = ReadAll(*raw, &reply, 1, Deadline::AfterSeconds(5));
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << "the server must close the connection";
  ::close(*raw);
  for (int i = 0; i < 100 && (*server)->rejected() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*server)->rejected(), 2);
  EXPECT_FALSE(TcpStoreServer::Start("127.0.0.1", 0, "").ok());
}

TEST(TcpStoreTest, ConnectToNobodyFailsAtTheDeadline) {
  auto listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  int port = listener->port;
  ::close(listener->fd);
  auto started = std::chrono::steady_clock::now();
  auto client = TcpStoreClient::Connect("127.0.0.1", port, "t", Deadline::AfterSeconds(0.3));
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
}

}  // namespace
}  // namespace ferry
