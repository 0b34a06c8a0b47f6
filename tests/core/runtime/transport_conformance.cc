// The transport conformance tests (TEST_P bodies) and their helpers; see transport_conformance.h.
#include "tests/core/runtime/transport_conformance.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include <unistd.h>

namespace ferry::testing {

namespace {

std::atomic<int> world_counter{0};

// Deterministic bytes for message `seed`.
std::vector<uint8_t> Pattern(int64_t bytes, uint64_t seed) {
  std::vector<uint8_t> data(static_cast<size_t>(bytes));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < data.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = static_cast<uint8_t>(x);
  }
  return data;
}

LocalBuffer Whole(MemoryHandle handle, const std::vector<uint8_t>& buffer) {
  return LocalBuffer{handle, 0, static_cast<int64_t>(buffer.size())};
}

}  // namespace

std::string ConformanceParamsName(const ::testing::TestParamInfo<ConformanceParams>& info) {
  std::string name = info.param.transport;
  for (const auto& [key, value] : info.param.options) name += "_" + value;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

Result<TransportWorld> CreateTransportWorld(const ConformanceParams& params, int size,
                                            Deadline deadline) {
  TransportWorld world;
  world.config = std::make_unique<Config>(RuntimeConfig());
  for (const auto& [name, value] : params.options) FERRY_RETURN_IF_ERROR(world.config->Set(name, value));
  world.store = std::make_unique<InMemoryStore>();
  std::string group = "conformance-" + std::to_string(::getpid()) + "-" +
                      std::to_string(world_counter.fetch_add(1));
  world.group_key = group;
  world.secret = "conformance-secret-" + group;
  for (int rank = 0; rank < size; ++rank) {
    TransportContext context;
    context.rank = rank;
    context.size = size;
    context.epoch = 1;
    context.config = world.config.get();
    context.store = world.store.get();
    context.group_key = group;
    context.secret = "conformance-secret-" + group;
    FERRY_ASSIGN_OR_RETURN(auto transport,
                           TransportRegistry::Default().Create(params.transport, context));
    world.ranks.push_back(std::move(transport));
  }
  std::vector<Bytes> infos;
  for (auto& transport : world.ranks) {
    FERRY_ASSIGN_OR_RETURN(Bytes info, transport->LocalEndpointInfo());
    infos.push_back(std::move(info));
  }
  // Each rank connects from its own thread, as separate processes would.
  std::vector<Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      for (int peer = 0; peer < size && results[rank].ok(); ++peer) {
        results[rank] = world.ranks[rank]->Connect(peer, infos[peer], deadline);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < size; ++rank) {
    if (!results[rank].ok()) return results[rank].WithContext("rank " + std::to_string(rank));
  }
  return world;
}

Status Driver::PollOnce() {
  Completion completions[32];
  for (int rank = 0; rank < static_cast<int>(world_.ranks.size()); ++rank) {
    if (!world_.ranks[rank]) continue;
    auto n = world_.ranks[rank]->Poll(completions, Deadline::After(std::chrono::nanoseconds(0)));
    if (!n.ok()) return n.status().WithContext("rank " + std::to_string(rank) + " poll");
    for (int i = 0; i < *n; ++i) done_[{rank, completions[i].request}] = completions[i];
  }
  return Status::Ok();
}

Result<Completion> Driver::Wait(int rank, RequestId id, Deadline deadline) {
  while (true) {
    auto it = done_.find({rank, id});
    if (it != done_.end()) {
      Completion c = it->second;
      done_.erase(it);
      return c;
    }
    if (deadline.Expired()) {
      return DeadlineExceeded("request " + std::to_string(id) + " of rank " +
                              std::to_string(rank) + " did not complete");
    }
    FERRY_RETURN_IF_ERROR(PollOnce());
    std::this_thread::yield();
  }
}

Result<std::vector<Completion>> Driver::WaitAll(
    const std::vector<std::pair<int, RequestId>>& requests, Deadline deadline) {
  std::vector<Completion> out;
  for (const auto& [rank, id] : requests) {
    FERRY_ASSIGN_OR_RETURN(Completion c, Wait(rank, id, deadline));
    out.push_back(std::move(c));
  }
  return out;
}

MemoryHandle MustRegister(Transport& transport, std::vector<uint8_t>& buffer) {
  MemoryDesc desc{buffer.data(), static_cast<int64_t>(buffer.size()), MemoryKind::kHost, -1};
  auto handle = transport.RegisterMemory(desc);
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  return handle.ok() ? *handle : MemoryHandle{};
}

#define FERRY_ASSERT_OK_AND_ASSIGN(lhs, expr)                                        \
  auto FERRY_CONCAT(r_, __LINE__) = (expr);                                         \
  ASSERT_TRUE(FERRY_CONCAT(r_, __LINE__).ok()) << FERRY_CONCAT(r_, __LINE__).status().ToString(); \
  lhs = std::move(FERRY_CONCAT(r_, __LINE__)).value()

TEST_P(TransportConformanceTest, NameAndCapabilities) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 1, TestDeadline()));
  EXPECT_EQ(world.ranks[0]->name(), GetParam().transport);
  TransportCapabilities caps = world.ranks[0]->capabilities();
  EXPECT_TRUE(caps.two_sided || caps.one_sided);
  EXPECT_GT(caps.bandwidth_bytes_per_second, 0);
}

TEST_P(TransportConformanceTest, OptionalMethodsAreUnimplementedUnlessOffered) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  Transport& t = *world.ranks[0];
  const TransportCapabilities caps = t.capabilities();
  std::vector<uint8_t> buffer(64);
  MemoryHandle handle = MustRegister(t, buffer);
  if (!caps.one_sided) {
    EXPECT_EQ(t.RemoteKey(handle).status().code(), StatusCode::kUnimplemented);
    EXPECT_EQ(t.PostPut(1, 5, Whole(handle, buffer), RemoteBuffer{}).status().code(),
              StatusCode::kUnimplemented);
    EXPECT_EQ(t.PostRecvNotify(1, 5).status().code(), StatusCode::kUnimplemented);
  }
  if (!caps.cancel) {
    EXPECT_EQ(t.Cancel(1).code(), StatusCode::kUnimplemented);
  }
}

// A process that knows rank 1's endpoint info but not the communicator's secret connects as rank
// 0 and sends on the tag rank 1 waits on: its connection is refused or its message dropped, and
// the real rank 0's message lands.
TEST_P(TransportConformanceTest, ImpostorWithoutTheSecretDeliversNothing) {
  if (GetParam().transport == "local") GTEST_SKIP() << "local joins threads of one process: no wire";
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  TransportContext context;
  context.rank = 0;
  context.size = 2;
  context.epoch = 1;
  context.config = world.config.get();
  context.store = world.store.get();
  context.group_key = "impostor";
  context.secret = "a guessed secret";
  FERRY_ASSERT_OK_AND_ASSIGN(auto impostor, TransportRegistry::Default().Create(GetParam().transport, context));
  FERRY_ASSERT_OK_AND_ASSIGN(Bytes info1, world.ranks[1]->LocalEndpointInfo());
  std::vector<uint8_t> received(4096, 0), forged(4096, 0xEE), real(4096, 0x07);
  MemoryHandle recv_handle = MustRegister(*world.ranks[1], received);
  MemoryHandle real_handle = MustRegister(*world.ranks[0], real);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 77, Whole(recv_handle, received)));
  Driver driver(world);
  Status connected = impostor->Connect(1, info1, Deadline::AfterSeconds(1));
  if (connected.ok()) {
    MemoryHandle forged_handle = MustRegister(*impostor, forged);
    auto sent = impostor->PostSend(1, 77, Whole(forged_handle, forged));
    Completion completions[4];
    for (int i = 0; i < 100; ++i) {  // half a second for the forged message to arrive
      (void)impostor->Poll(completions, Deadline::After(std::chrono::nanoseconds(0)));
      ASSERT_TRUE(driver.PollOnce().ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    (void)sent;
  }
  EXPECT_FALSE(driver.Wait(1, recv, Deadline::After(std::chrono::milliseconds(50))).ok())
      << "rank 1's receive completed with the impostor's message";
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send, world.ranks[0]->PostSend(1, 77, Whole(real_handle, real)));
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll({{0, send}, {1, recv}}, TestDeadline()));
  ASSERT_TRUE(done[1].status.ok()) << done[1].status.ToString();
  EXPECT_EQ(received, real);
}

// Someone who copied rank 0's first message to rank 1 off the wire sends it again (a clone of
// rank 0 holding the secret produces exactly those bytes: its first message on that tag), with
// other data: rank 1's next receive on that tag must not take it, and the real second message
// lands. Transports that authenticate connections instead (tcp: a hello that does not replay,
// tcp_auth_test) cannot be fed a copy, and local has no wire. libfabric's peer watch admits one
// process per rank, so no second instance can send as rank 0 here; message_seal_test's
// TagSealTest shows that the copy's wire tag matches no later receive.
TEST_P(TransportConformanceTest, ACopyOfAnEarlierMessageDeliversNothing) {
  const std::string& name = GetParam().transport;
  auto inner = GetParam().options.find("fault.inner");  // the fault transport's wire is its inner one's
  const std::string wire = name != "fault" ? name : inner == GetParam().options.end() ? "tcp" : inner->second;
  if (wire == "local" || wire == "tcp") GTEST_SKIP() << "authenticates connections, not messages";
  if (wire == "libfabric") GTEST_SKIP() << "one process per rank (peer watch); see TagSealTest";
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  std::vector<uint8_t> received(4096, 0), first(4096, 0x01), forged(4096, 0xEE), second(4096, 0x02);
  MemoryHandle recv_handle = MustRegister(*world.ranks[1], received);
  MemoryHandle first_handle = MustRegister(*world.ranks[0], first);
  MemoryHandle second_handle = MustRegister(*world.ranks[0], second);
  Driver driver(world);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv1, world.ranks[1]->PostRecv(0, 77, Whole(recv_handle, received)));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send1, world.ranks[0]->PostSend(1, 77, Whole(first_handle, first)));
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll({{0, send1}, {1, recv1}}, TestDeadline()));
  ASSERT_TRUE(done[1].status.ok()) << done[1].status.ToString();
  ASSERT_EQ(received, first);
  TransportContext context;
  context.rank = 0;
  context.size = 2;
  context.epoch = 1;
  context.config = world.config.get();
  context.store = world.store.get();
  context.group_key = world.group_key;
  context.secret = world.secret;
  FERRY_ASSERT_OK_AND_ASSIGN(auto copier, TransportRegistry::Default().Create(name, context));
  FERRY_ASSERT_OK_AND_ASSIGN(Bytes info1, world.ranks[1]->LocalEndpointInfo());
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv2, world.ranks[1]->PostRecv(0, 77, Whole(recv_handle, received)));
  ASSERT_TRUE(copier->Connect(1, info1, Deadline::AfterSeconds(2)).ok());
  MemoryHandle forged_handle = MustRegister(*copier, forged);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId copy, copier->PostSend(1, 77, Whole(forged_handle, forged)));
  Completion completions[4];
  for (int i = 0; i < 100; ++i) {  // half a second for the copy to arrive
    (void)copier->Poll(completions, Deadline::After(std::chrono::nanoseconds(0)));
    ASSERT_TRUE(driver.PollOnce().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  (void)copy;
  EXPECT_FALSE(driver.Wait(1, recv2, Deadline::After(std::chrono::milliseconds(50))).ok())
      << "rank 1's second receive took the copy of the first message";
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send2, world.ranks[0]->PostSend(1, 77, Whole(second_handle, second)));
  FERRY_ASSERT_OK_AND_ASSIGN(done, driver.WaitAll({{0, send2}, {1, recv2}}, TestDeadline()));
  ASSERT_TRUE(done[1].status.ok()) << done[1].status.ToString();
  EXPECT_EQ(received, second);
}

TEST_P(TransportConformanceTest, SizesFromZeroBytes) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  Driver driver(world);
  std::vector<int64_t> sizes = {0, 1, 7, 4096, (1 << 20) + 3, 16 << 20};
  if (GetParam().largest_message > sizes.back()) sizes.push_back(GetParam().largest_message);
  for (int64_t size : sizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::vector<uint8_t> sent = Pattern(size, static_cast<uint64_t>(size));
    std::vector<uint8_t> received(static_cast<size_t>(size) + 16, 0xEE);
    MemoryHandle send_handle = MustRegister(*world.ranks[0], sent);
    MemoryHandle recv_handle = MustRegister(*world.ranks[1], received);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 42, Whole(recv_handle, received)));
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId send, world.ranks[0]->PostSend(1, 42, Whole(send_handle, sent)));
    FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll({{0, send}, {1, recv}}, TestDeadline()));
    ASSERT_TRUE(done[0].status.ok()) << done[0].status.ToString();
    ASSERT_TRUE(done[1].status.ok()) << done[1].status.ToString();
    EXPECT_EQ(done[1].bytes, size);
    ASSERT_TRUE(std::equal(sent.begin(), sent.end(), received.begin()));
    EXPECT_EQ(received[static_cast<size_t>(size)], 0xEE) << "wrote past the message";
    EXPECT_TRUE(world.ranks[0]->DeregisterMemory(send_handle).ok());
    EXPECT_TRUE(world.ranks[1]->DeregisterMemory(recv_handle).ok());
  }
}

TEST_P(TransportConformanceTest, ManyInFlightBothDirectionsSendsBeforeAndAfterReceives) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 3, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  Driver driver(world);
  constexpr int kMessages = 64;
  struct Message {
    int from, to;
    uint64_t tag;
    std::vector<uint8_t> sent, received;
  };
  std::vector<Message> messages;
  for (int i = 0; i < kMessages; ++i) {
    int from = i % 3, to = (i / 3 + 1 + from) % 3;
    int64_t size = (i * 7919) % (256 << 10);
    messages.push_back({from, to, static_cast<uint64_t>(1000 + i), Pattern(size, i),
                        std::vector<uint8_t>(static_cast<size_t>(size))});
  }
  std::vector<std::pair<int, RequestId>> requests;
  // Half the receives are posted before their sends, half after (unexpected messages).
  for (int i = 0; i < kMessages; i += 2) {
    Message& m = messages[i];
    MemoryHandle h = MustRegister(*world.ranks[m.to], m.received);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId id, world.ranks[m.to]->PostRecv(m.from, m.tag, Whole(h, m.received)));
    requests.push_back({m.to, id});
  }
  for (Message& m : messages) {
    MemoryHandle h = MustRegister(*world.ranks[m.from], m.sent);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId id, world.ranks[m.from]->PostSend(m.to, m.tag, Whole(h, m.sent)));
    requests.push_back({m.from, id});
  }
  ASSERT_TRUE(driver.PollOnce().ok());
  for (int i = 1; i < kMessages; i += 2) {
    Message& m = messages[i];
    MemoryHandle h = MustRegister(*world.ranks[m.to], m.received);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId id, world.ranks[m.to]->PostRecv(m.from, m.tag, Whole(h, m.received)));
    requests.push_back({m.to, id});
  }
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll(requests, TestDeadline()));
  for (const Completion& c : done) ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  for (const Message& m : messages) EXPECT_EQ(m.sent, m.received) << "tag " << m.tag;
}

TEST_P(TransportConformanceTest, CompletionOutOfOrderAndSameTagInPostingOrder) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  Driver driver(world);
  constexpr int kTags = 16;
  std::vector<std::vector<uint8_t>> sent, received;
  for (int i = 0; i < kTags; ++i) {
    sent.push_back(Pattern(1000 + i, 77 + i));
    received.push_back(std::vector<uint8_t>(1100));
  }
  std::vector<std::pair<int, RequestId>> requests;
  // Receives posted in reverse tag order; the last two share tag 5 and must match in order.
  for (int i = kTags - 1; i >= 0; --i) {
    uint64_t tag = i >= kTags - 2 ? 5000 : static_cast<uint64_t>(i);
    MemoryHandle h = MustRegister(*world.ranks[1], received[i]);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId id, world.ranks[1]->PostRecv(0, tag, Whole(h, received[i])));
    requests.push_back({1, id});
  }
  for (int i = 0; i < kTags; ++i) {
    uint64_t tag = i >= kTags - 2 ? 5000 : static_cast<uint64_t>(i);
    MemoryHandle h = MustRegister(*world.ranks[0], sent[i]);
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId id, world.ranks[0]->PostSend(1, tag, Whole(h, sent[i])));
    requests.push_back({0, id});
  }
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll(requests, TestDeadline()));
  for (const Completion& c : done) ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  for (int i = 0; i < kTags - 2; ++i) {
    EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), received[i].begin())) << "tag " << i;
  }
  // Same tag: the first send (i = kTags-2) lands in the first posted receive (i = kTags-1).
  EXPECT_TRUE(std::equal(sent[kTags - 2].begin(), sent[kTags - 2].end(), received[kTags - 1].begin()));
  EXPECT_EQ(done[0].bytes, static_cast<int64_t>(sent[kTags - 2].size()));
}

TEST_P(TransportConformanceTest, LoopbackToSelf) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 1, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  Driver driver(world);
  std::vector<uint8_t> sent = Pattern(3 << 20, 5), received(3 << 20);
  MemoryHandle hs = MustRegister(*world.ranks[0], sent);
  MemoryHandle hr = MustRegister(*world.ranks[0], received);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send, world.ranks[0]->PostSend(0, 9, Whole(hs, sent)));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[0]->PostRecv(0, 9, Whole(hr, received)));
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll({{0, send}, {0, recv}}, TestDeadline()));
  ASSERT_TRUE(done[0].status.ok() && done[1].status.ok()) << done[1].status.ToString();
  EXPECT_EQ(sent, received);
}

TEST_P(TransportConformanceTest, ReceiveBufferTooSmallIsOutOfRange) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  Driver driver(world);
  std::vector<uint8_t> sent = Pattern(4096, 1), small(100), next_sent = Pattern(64, 2), next(64);
  MemoryHandle hs = MustRegister(*world.ranks[0], sent);
  MemoryHandle hn = MustRegister(*world.ranks[0], next_sent);
  MemoryHandle hr = MustRegister(*world.ranks[1], small);
  MemoryHandle hx = MustRegister(*world.ranks[1], next);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 1, Whole(hr, small)));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send, world.ranks[0]->PostSend(1, 1, Whole(hs, sent)));
  FERRY_ASSERT_OK_AND_ASSIGN(Completion bad, driver.Wait(1, recv, TestDeadline()));
  EXPECT_EQ(bad.status.code(), StatusCode::kOutOfRange) << bad.status.ToString();
  (void)send;
  // The link still works afterwards.
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv2, world.ranks[1]->PostRecv(0, 2, Whole(hx, next)));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId send2, world.ranks[0]->PostSend(1, 2, Whole(hn, next_sent)));
  FERRY_ASSERT_OK_AND_ASSIGN(Completion good, driver.Wait(1, recv2, TestDeadline()));
  EXPECT_TRUE(good.status.ok()) << good.status.ToString();
  EXPECT_EQ(next, next_sent);
  (void)send2;
}

TEST_P(TransportConformanceTest, PeerThatExitsGivesAnErrorNotAHang) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  Driver driver(world);
  std::vector<uint8_t> received(1 << 20);
  MemoryHandle hr = MustRegister(*world.ranks[1], received);
  std::vector<std::pair<int, RequestId>> requests;
  if (world.ranks[1]->capabilities().two_sided) {
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 3, Whole(hr, received)));
    requests.push_back({1, recv});
  }
  if (world.ranks[1]->capabilities().one_sided) {
    FERRY_ASSERT_OK_AND_ASSIGN(RequestId notify, world.ranks[1]->PostRecvNotify(0, 4));
    requests.push_back({1, notify});
  }
  ASSERT_TRUE(driver.PollOnce().ok());
  world.ranks[0].reset();  // rank 0 "exits"
  auto started = std::chrono::steady_clock::now();
  Deadline deadline = Deadline::AfterSeconds(std::min(30.0, GetParam().deadline_seconds));
  for (const auto& request : requests) {
    FERRY_ASSERT_OK_AND_ASSIGN(Completion c, driver.Wait(request.first, request.second, deadline));
    EXPECT_FALSE(c.status.ok());
    EXPECT_NE(c.status.message().find('0'), std::string::npos)
        << "the error should name the peer: " << c.status.ToString();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
}

TEST_P(TransportConformanceTest, AbortFromAnotherThreadEndsPendingRequests) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  std::vector<uint8_t> received(4096);
  MemoryHandle hr = MustRegister(*world.ranks[1], received);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 3, Whole(hr, received)));
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    world.ranks[1]->Abort(Aborted("test abort"));
  });
  auto started = std::chrono::steady_clock::now();
  Completion out[4];
  bool saw_abort = false;
  // A long poll must return promptly once aborted.
  while (std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
    auto n = world.ranks[1]->Poll(out, Deadline::AfterSeconds(20));
    if (!n.ok()) {
      EXPECT_EQ(n.status().code(), StatusCode::kAborted);
      break;
    }
    for (int i = 0; i < *n; ++i) {
      if (out[i].request == recv) {
        EXPECT_EQ(out[i].status.code(), StatusCode::kAborted);
        saw_abort = true;
      }
    }
    if (saw_abort) break;
  }
  aborter.join();
  EXPECT_TRUE(saw_abort);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  auto after = world.ranks[1]->PostRecv(0, 4, Whole(hr, received));
  EXPECT_FALSE(after.ok());
}

TEST_P(TransportConformanceTest, CancelledReceiveCompletesAborted) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().two_sided) GTEST_SKIP() << "not two-sided";
  if (!world.ranks[0]->capabilities().cancel) GTEST_SKIP() << "cannot cancel";
  Driver driver(world);
  std::vector<uint8_t> received(64);
  MemoryHandle hr = MustRegister(*world.ranks[1], received);
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId recv, world.ranks[1]->PostRecv(0, 3, Whole(hr, received)));
  ASSERT_TRUE(world.ranks[1]->Cancel(recv).ok());
  FERRY_ASSERT_OK_AND_ASSIGN(Completion c, driver.Wait(1, recv, TestDeadline()));
  EXPECT_EQ(c.status.code(), StatusCode::kAborted);
}

TEST_P(TransportConformanceTest, PutWithNotify) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 2, TestDeadline()));
  if (!world.ranks[0]->capabilities().one_sided) GTEST_SKIP() << "not one-sided";
  Driver driver(world);
  std::vector<uint8_t> sent = Pattern(1 << 20, 3), target(2 << 20, 0);
  MemoryHandle hs = MustRegister(*world.ranks[0], sent);
  MemoryHandle ht = MustRegister(*world.ranks[1], target);
  FERRY_ASSERT_OK_AND_ASSIGN(Bytes key, world.ranks[1]->RemoteKey(ht));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId notify, world.ranks[1]->PostRecvNotify(0, 11));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestId put,
                             world.ranks[0]->PostPut(1, 11, Whole(hs, sent), RemoteBuffer{key, 4096}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto done, driver.WaitAll({{0, put}, {1, notify}}, TestDeadline()));
  ASSERT_TRUE(done[0].status.ok() && done[1].status.ok()) << done[1].status.ToString();
  EXPECT_EQ(done[1].bytes, static_cast<int64_t>(sent.size()));
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), target.begin() + 4096));
  EXPECT_EQ(target[4095], 0);
}

TEST_P(TransportConformanceTest, RejectsUnsupportedMemoryKind) {
  FERRY_ASSERT_OK_AND_ASSIGN(TransportWorld world, CreateTransportWorld(GetParam(), 1, TestDeadline()));
  if (world.ranks[0]->capabilities().cuda_memory) GTEST_SKIP() << "moves CUDA memory";
  int fake = 0;
  auto handle = world.ranks[0]->RegisterMemory(MemoryDesc{&fake, 4, MemoryKind::kCuda, 0});
  EXPECT_FALSE(handle.ok());
}

}  // namespace ferry::testing
