// The NCCL transport on one GPU: a one-rank communicator (NCCL refuses two ranks on one GPU) that
// sends to itself. Several tagged messages of sizes from zero bytes up, posted in one group with
// the receives in another order than the sends, arrive intact; posts outside a group go out at the
// next Poll; init is non-blocking; Abort from another thread returns at once and fails what was
// posted. Skips visibly without a GPU or an NCCL library.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "tests/transports/nccl/nccl_gpu_testutil.h"

namespace ferry::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class NcclOneRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
    library_ = FindNcclLibrary();
    if (library_.empty()) GTEST_SKIP() << "SKIPPED: no loadable libnccl.so.2";
    auto created = CreateNcclRank(0, 1, &store_, library_);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    rank_ = std::move(*created);
    const auto start = Clock::now();
    ASSERT_TRUE(rank_.transport->Connect(0, {}, Deadline::AfterSeconds(60)).ok());
    std::printf("one-rank NCCL communicator ready in %.3f s (%s)\n", SecondsSince(start),
                library_.c_str());
  }
  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
  }
  // `bytes` of device memory (at least one byte), registered; its handle.
  std::pair<char*, MemoryHandle> DeviceBlock(int64_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))), cudaSuccess);
    allocations_.push_back(p);
    auto h = rank_.transport->RegisterMemory({p, bytes, MemoryKind::kCuda, 0});
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return {static_cast<char*>(p), h.ok() ? *h : MemoryHandle{}};
  }
  // Polls until every request in `ids` completed; their completions by request.
  std::map<RequestId, Completion> WaitAll(const std::vector<RequestId>& ids, Deadline deadline) {
    std::map<RequestId, Completion> done;
    std::vector<Completion> out(16);
    while (done.size() < ids.size() && !deadline.Expired()) {
      auto n = rank_.transport->Poll(out, Deadline::After(std::chrono::milliseconds(50)));
      if (!n.ok()) break;
      for (int i = 0; i < *n; ++i) done[out[i].request] = out[i];
    }
    return done;
  }

  InMemoryStore store_;
  std::string library_;
  NcclRank rank_;
  std::vector<void*> allocations_;
};

TEST_F(NcclOneRankTest, TaggedMessagesToSelfInOneGroupFromZeroBytes) {
  const std::vector<int64_t> sizes = {0, 1, 4096, (1 << 20) + 3, 8 << 20};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  auto [src, src_handle] = DeviceBlock(total);
  auto [dst, dst_handle] = DeviceBlock(total);
  std::vector<uint8_t> pattern(static_cast<size_t>(total));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + i / 251);
  ASSERT_EQ(cudaMemcpy(src, pattern.data(), pattern.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0, static_cast<size_t>(total)), cudaSuccess);
  Transport& t = *rank_.transport;
  std::vector<RequestId> ids;
  ASSERT_TRUE(t.BeginGroup().ok());
  int64_t offset = total;
  for (size_t k = sizes.size(); k-- > 0;) {  // receives last message first, tags 100 + k
    offset -= sizes[k];
    auto id = t.PostRecv(0, 100 + k, {dst_handle, offset, sizes[k]});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {  // sends in order
    auto id = t.PostSend(0, 100 + k, {src_handle, offset, sizes[k]});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
    offset += sizes[k];
  }
  ASSERT_TRUE(t.EndGroup().ok());
  auto done = WaitAll(ids, Deadline::AfterSeconds(60));
  ASSERT_EQ(done.size(), ids.size());
  for (const auto& [id, c] : done) EXPECT_TRUE(c.status.ok()) << c.status.ToString();
  std::vector<uint8_t> got(pattern.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == pattern);
}

TEST_F(NcclOneRankTest, PostsOutsideAGroupGoOutAtTheNextPoll) {
  auto [src, src_handle] = DeviceBlock(1 << 16);
  auto [dst, dst_handle] = DeviceBlock(1 << 16);
  ASSERT_EQ(cudaMemset(src, 0x5a, 1 << 16), cudaSuccess);
  auto recv = rank_.transport->PostRecv(0, 7, {dst_handle, 0, 1 << 16});
  auto send = rank_.transport->PostSend(0, 7, {src_handle, 0, 1 << 16});
  ASSERT_TRUE(recv.ok() && send.ok());
  auto done = WaitAll({*recv, *send}, Deadline::AfterSeconds(30));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[*recv].bytes, 1 << 16);
  std::vector<uint8_t> got(1 << 16);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<uint8_t>(1 << 16, 0x5a));
}

TEST_F(NcclOneRankTest, PostBeyondTheRegistrationIsOutOfRange) {
  auto [dst, dst_handle] = DeviceBlock(64);
  auto id = rank_.transport->PostRecv(0, 1, {dst_handle, 32, 64});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kOutOfRange);
}

// Abort from another thread while a group is open: it returns at once, the group's posts
// complete ABORTED, later posts and Polls fail ABORTED, and tearing the transport down (the
// detached ncclCommAbort) stays within deadline.abort (5 s).
TEST_F(NcclOneRankTest, AbortFromAnotherThreadReturnsAtOnce) {
  auto [buffer, handle] = DeviceBlock(4096);
  Transport& t = *rank_.transport;
  ASSERT_TRUE(t.BeginGroup().ok());
  auto recv = t.PostRecv(0, 9, {handle, 0, 4096});
  ASSERT_TRUE(recv.ok());
  double abort_seconds = 0;
  std::thread aborter([&] {
    const auto start = Clock::now();
    t.Abort(Aborted("test abort"));
    abort_seconds = SecondsSince(start);
  });
  aborter.join();
  EXPECT_LT(abort_seconds, 0.1);
  EXPECT_EQ(t.EndGroup().code(), StatusCode::kAborted);
  auto done = WaitAll({*recv}, Deadline::AfterSeconds(5));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[*recv].status.code(), StatusCode::kAborted);
  EXPECT_EQ(t.PostSend(0, 9, {handle, 0, 4096}).status().code(), StatusCode::kAborted);
  std::vector<Completion> out(1);
  EXPECT_EQ(t.Poll(out, Deadline::AfterSeconds(1)).status().code(), StatusCode::kAborted);
  const auto start = Clock::now();
  rank_.transport.reset();
  const double teardown = SecondsSince(start);
  EXPECT_LT(teardown, 5.5);
  std::printf("Abort returned in %.6f s; teardown (ncclCommAbort) %.3f s\n", abort_seconds, teardown);
}

}  // namespace
}  // namespace ferry::testing
