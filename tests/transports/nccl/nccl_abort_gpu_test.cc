// The abort that must return although NCCL's would not: a two-rank NCCL communicator whose second
// rank (a helper process) joins the rendezvous, fetches the unique id and then stops (SIGSTOP)
// before it joins NCCL. The survivor's non-blocking init cannot complete; its Connect returns at
// its deadline, Abort returns at once, and tearing the transport down returns within deadline.abort
// whether or not ncclCommAbort ever returns (then it is reported and leaked). Both ranks are
// forked processes with deadlines; the stopped helper is killed at the end. Skips visibly without a
// GPU or an NCCL library. (NCCL refuses two ranks on one GPU, so on one GPU a stopped peer is the
// way to hang its init.)
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>

#include "core/runtime/bootstrap.h"
#include "tests/core/runtime/executor_testutil.h"
#include "tests/transports/nccl/nccl_gpu_testutil.h"

namespace ferry::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Result<Rendezvous> Join(int rank, int port) {
  BootstrapInfo info;
  info.rank = rank;
  info.size = 2;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "nccl-abort-test";
  return StartRendezvous(info, Deadline::AfterSeconds(20));
}

// Exit codes: 0 as expected; 2 init did not time out; 3 Connect overran its deadline; 4 Abort was
// slow; 5 Poll did not report the abort; 6 teardown overran deadline.abort; kNoGpu without a GPU.
// CUDA is first touched here, in the forked child (CUDA does not survive a fork).
constexpr int kNoGpu = 77;
int Survivor(int port, const std::string& library) {
  auto rendezvous = Join(0, port);
  if (!rendezvous.ok()) return Report(rendezvous.status());
  if (!HaveGpu()) {  // an empty id sends the helper home instead of into SIGSTOP
    (void)rendezvous->store->Set("e0/nccl/unique_id", Bytes{}, Deadline::AfterSeconds(5));
    return kNoGpu;
  }
  auto rank = CreateNcclRank(0, 2, rendezvous->store.get(), library, {"deadline.abort=2s"});
  if (!rank.ok()) return Report(rank.status());
  auto start = Clock::now();
  Status connected = rank->transport->Connect(0, {}, Deadline::AfterSeconds(3));
  const double connect_seconds = SecondsSince(start);
  std::printf("init with a stopped peer: %s after %.3f s\n", connected.ToString().c_str(),
              connect_seconds);
  if (connected.code() != StatusCode::kDeadlineExceeded) return 2;
  if (connect_seconds > 3.5) return 3;
  start = Clock::now();
  rank->transport->Abort(Aborted("peer stopped"));
  const double abort_seconds = SecondsSince(start);
  if (abort_seconds > 0.1) return 4;
  std::vector<Completion> out(1);
  auto polled = rank->transport->Poll(out, Deadline::AfterSeconds(1));
  if (polled.ok() || polled.status().code() != StatusCode::kAborted) return 5;
  start = Clock::now();
  rank->transport.reset();
  const double teardown_seconds = SecondsSince(start);
  std::printf("Abort returned in %.6f s; teardown %.3f s (bound 2 s)\n", abort_seconds,
              teardown_seconds);
  std::fflush(stdout);
  return teardown_seconds <= 2.5 ? 0 : 6;
}

// Joins the rendezvous, waits for the unique id rank 0 publishes, then stops itself.
int StoppedHelper(int port) {
  auto rendezvous = Join(1, port);
  if (!rendezvous.ok()) return Report(rendezvous.status());
  auto id = rendezvous->store->Get("e0/nccl/unique_id", Deadline::AfterSeconds(20));
  if (!id.ok() || id->empty()) return 7;
  ::raise(SIGSTOP);
  return 0;
}

TEST(NcclAbortTest, AbortReturnsWhenAPeerIsStoppedDuringInit) {
  const std::string library = FindNcclLibrary();
  if (library.empty()) GTEST_SKIP() << "SKIPPED: no loadable libnccl.so.2";
  // The helper stays stopped until RunRanks' deadline kills it: -SIGKILL is its expected code.
  // Without a GPU the survivor publishes an empty id and leaves; the helper returns 7.
  auto codes = RunRanks(2, 15, [&](int rank, int port) {
    return rank == 0 ? Survivor(port, library) : StoppedHelper(port);
  });
  if (codes[0] == kNoGpu) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  EXPECT_EQ(codes, (std::vector<int>{0, -SIGKILL}));
}

}  // namespace
}  // namespace ferry::testing
