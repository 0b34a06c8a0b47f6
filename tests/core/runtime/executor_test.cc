// Executor over real processes: hand-made plans run by forked ranks that rendezvous through the TCP
// store and talk over the tcp transport. Each child has a deadline; the parent kills children that
// outlive the test's own deadline.
#include "core/runtime/executor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "core/runtime/bootstrap.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/socket_util.h"
#include "core/runtime/transport.h"
#include "tests/core/plan/plan_fixture.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

TEST(ExecutorTest, ThreeProcessesOverTcpPackSendUnpackForwardAndCopy) {
  TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    // A staging budget that fits one slot at a time forces rank 0's packs to take turns.
    auto joined = Join(rank, 3, port, {"executor.staging_budget=1100KiB", "executor.copy_threads=2"});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      if (!VerifyThreeRankPlan(r, rank)) return 2;
      if (stats->peak_staging_bytes > 1100 * 1024) return 3;
      if (rank == 0 && stats->bytes_sent != 2 * kRows * 512 * 4) return 4;
      // Every link of this plan is a network link.
      if (stats->bytes_sent_network != stats->bytes_sent || stats->bytes_sent_intra_node != 0) return 6;
      // The first refit reads each op's copy pairs from the plan; the others reuse that analysis.
      if ((stats->ops_analysed > 0) != (refit == 0)) return 7;
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// executor.trace_dir: each run writes the rank's timeline, one file per run, with the set-up and
// a span for every op of the rank (each on its lane: messages on "network", copies on "copies").
TEST(ExecutorTest, TraceDirGetsEachRunsTimelineWithEveryOp) {
  TransferPlan plan = ThreeRankPlan();
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/traces/refit";  // made by the executor
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {"executor.trace_dir=" + dir});
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    for (int refit = 1; refit <= 2; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      std::ifstream in(dir + "/rank" + std::to_string(rank) + ".run" + std::to_string(refit) + ".json");
      if (!in) return 2;
      const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (trace.is_discarded()) return 3;
      int set_up = 0, ops = 0;
      for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] != "X") continue;
        if (e["pid"] != rank || e["dur"].get<double>() < 0) return 4;
        const std::string name = e["name"];
        if (name == "set-up") ++set_up;
        const bool message = name.rfind("send", 0) == 0 || name.rfind("recv", 0) == 0 || name.rfind("forward", 0) == 0;
        if (name.find(" op ") != std::string::npos) {
          ++ops;
          if (e["tid"] != (message ? 1 : 2)) return 5;
        }
      }
      if (set_up != 1 || ops != stats->ops) return 6;
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 7;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// The arena grants whole 256-byte units, so a slot of 1 MiB + 1 byte takes 1 MiB + 256: with
// exactly 1 MiB + 1 of budget the rank holding it is refused at set-up, naming the op and the
// budget, instead of starting and finding later that the slot never fits; its peers fail too.
TEST(ExecutorTest, StagingBudgetIsCheckedInTheArenasUnits) {
  TransferPlan plan = ThreeRankPlan();
  ASSERT_FALSE(plan.slots.empty());
  plan.slots[0].bytes += 1;
  const int owner = plan.slots[0].rank;
  const std::string budget = std::to_string(plan.slots[0].bytes);
  // The owner must fail naming the op and the budget; its peers only must not succeed (they fail
  // wherever the owner's abort, or the store host's exit, finds them).
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {"executor.staging_budget=" + budget});
    if (!joined.ok()) return rank == owner ? Report(joined.status()) : 0;
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(20));
    if (stats.ok()) return 1;
    if (rank != owner) return 0;
    const std::string message = stats.status().message();
    const bool named = message.find("of staging at once") != std::string::npos &&
                       message.find("executor.staging_budget") != std::string::npos;
    if (!named) std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
    return named ? 0 : 2;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// Ranks of one node: message 1 (rank 0 -> 1, pack/unpack) goes as a direct read, by mapping rank
// 0's memfd buffer (shared) or through process_vm_readv (plain memory); message 2 feeds a Forward,
// so it and the relayed message 3 keep the staged path. With executor.direct_intra_node=false
// everything is staged. Data is checked either way. Rank 0's offer is full in the first refit and
// abbreviated after it (offer_history.h); when the receiver `forgets` its history after refit 1,
// it asks for the full offer in refit 2 and rank 0 sends both.
void RunSameNode(bool shared, bool direct, bool forget = false) {
  TransferPlan plan = ThreeRankPlan(LinkClass::kSameNode);
  const std::vector<DirectRead> reads = FindDirectReads(plan, 0);
  ASSERT_EQ(reads.size(), 1u);
  const int64_t full_offer = DirectReadOfferBytes(reads[0].source_buffers.size());
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {std::string("executor.direct_intra_node=") + (direct ? "true" : "false")},
                       /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank, shared);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok() && stats.status().message().find("process_vm_readv from peer") != std::string::npos &&
          stats.status().code() == StatusCode::kFailedPrecondition) {
        return 6;  // ptrace access between processes is denied on this machine
      }
      if (!stats.ok()) return Report(stats.status());
      if (!VerifyThreeRankPlan(r, rank)) return 2;
      const int64_t direct_bytes = rank == 1 && direct ? kRows * 512 * 4 : 0;
      if (stats->bytes_read_direct != direct_bytes) {
        std::fprintf(stderr, "rank %d read %lld bytes directly\n", rank,
                     static_cast<long long>(stats->bytes_read_direct));
        return 3;
      }
      // Rank 0 sends message 2 staged, and message 1 too unless it goes direct.
      if (rank == 0 && stats->bytes_sent != (direct ? 1 : 2) * kRows * 512 * 4) return 4;
      const bool asked_again = forget && refit == 2;
      const int64_t offered = !direct ? 0
                              : refit == 0 ? full_offer
                              : AbbreviatedOfferBytes() + (asked_again ? full_offer : 0);
      const int full_offers = direct && (refit == 0 || asked_again) ? 1 : 0;
      if (rank == 0 && (stats->offer_bytes_sent != offered || stats->full_offers_sent != full_offers)) {
        std::fprintf(stderr, "refit %d: %lld offer bytes in %d full offers, expected %lld in %d\n", refit,
                     static_cast<long long>(stats->offer_bytes_sent), stats->full_offers_sent,
                     static_cast<long long>(offered), full_offers);
        return 8;
      }
      if (forget && rank == 1 && refit == 1) r.executor->ForgetRegistrations();
      // Every link of this plan is a same-node link.
      if (stats->bytes_sent_intra_node != stats->bytes_sent || stats->bytes_sent_network != 0) return 7;
      PoisonDestinations(r);  // the next refit must write it all again
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  if (!shared && codes[1] == 6) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(ExecutorTest, SameNodeMessageIsOneCopyFromMappedSharedMemory) { RunSameNode(true, true); }
TEST(ExecutorTest, SameNodeMessageIsOneCopyThroughProcessVmReadv) { RunSameNode(false, true); }
TEST(ExecutorTest, SameNodeMessagesAreStagedWhenDirectReadsAreOff) { RunSameNode(true, false); }
TEST(ExecutorTest, AReceiverThatForgotItsOffersAsksForTheFullOfferAgain) { RunSameNode(true, true, true); }

// Two same-node ranks, one message of two strided copies from rank 0's ordinary heap memory:
// even columns [0, 512) of the source (small element gaps) into the even elements of rank 1's
// "even" buffer (strided on both sides), and columns [512, 640) transposed (element gaps of a
// whole row) into rank 1's dense "transposed" buffer. Packed and unpacked when staged; with
// direct reads, one process_vm_readv gather per batch (before: UNIMPLEMENTED, rows not contiguous).
TransferPlan StridedSameNodePlan() {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", kRows * kCols * 4}};
  plan.destination_buffers = {{1, "even", kRows * 512 * 4}, {1, "transposed", 128 * kRows * 4}};
  const int64_t even = kRows * 256 * 4, transposed = 128 * kRows * 4, bytes = even + transposed;
  auto strided = [](Space space, int buffer, int64_t offset, int64_t rows, int64_t cols,
                    int64_t row_stride, int64_t col_stride) {
    Region r = Fp32Matrix(space, buffer, offset, rows, cols, row_stride);
    r.strides[1] = col_stride;
    return r;
  };
  const int out = plan.AddSlot(0, bytes), in = plan.AddSlot(1, bytes);
  Op pack{.kind = OpKind::kPack, .rank = 0, .bytes = bytes};
  const int p = plan.AddOp(pack, {},
      {{strided(Space::kSource, 0, 0, kRows, 256, kCols, 2), Fp32Matrix(Space::kStaging, out, 0, kRows, 256, 256)},
       {strided(Space::kSource, 0, 512 * 4, 128, kRows, 1, kCols),
        Fp32Matrix(Space::kStaging, out, even, 128, kRows, kRows)}});
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 1, .bytes = bytes};
  send.SetData(ByteRange(Space::kStaging, out, 0, bytes));
  plan.AddOp(send, {p});
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 1, .bytes = bytes};
  recv.SetData(ByteRange(Space::kStaging, in, 0, bytes));
  const int r = plan.AddOp(recv);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = bytes};
  plan.AddOp(unpack, {r},
      {{Fp32Matrix(Space::kStaging, in, 0, kRows, 256, 256), strided(Space::kDestination, 0, 0, kRows, 256, 512, 2)},
       {Fp32Matrix(Space::kStaging, in, even, 128, kRows, kRows),
        Fp32Matrix(Space::kDestination, 1, 0, 128, kRows, kRows)}});
  return plan;
}

// Rank 1's buffers of StridedSameNodePlan: every element it writes, and the odd elements of
// "even" untouched (-1).
bool VerifyStrided(const Rank& r) {
  const auto* even = static_cast<const float*>(r.memory.destination[0].base);
  const auto* transposed = static_cast<const float*>(r.memory.destination[1].base);
  for (int64_t i = 0; i < kRows * 512; ++i) {
    const int64_t row = i / 512, col = i % 512;
    if (even[i] != (col % 2 == 0 ? Value(row, col) : -1.0f)) return false;
  }
  for (int64_t i = 0; i < 128 * kRows; ++i) {
    if (transposed[i] != Value(i % kRows, 512 + i / kRows)) return false;
  }
  return true;
}

TEST(ExecutorTest, StridedSameNodeMessageIsOneCopyThroughProcessVmReadv) {
  TransferPlan plan = StridedSameNodePlan();
  const int64_t bytes = (kRows * 256 + 128 * kRows) * 4;
  auto codes = RunRanks(2, 60, [&](int rank, int port) {
    auto joined = Join(rank, 2, port, {"executor.direct_intra_node=true", "executor.copy_threads=2"},
                       /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);  // ordinary heap memory: no memfd to map
    for (int refit = 0; refit < 2; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok() && stats.status().code() == StatusCode::kFailedPrecondition &&
          stats.status().message().find("process_vm_readv from peer") != std::string::npos) {
        return 6;  // ptrace access between processes is denied on this machine
      }
      if (!stats.ok()) return Report(stats.status());
      if (rank == 1 && (!VerifyStrided(r) || stats->bytes_read_direct != bytes)) return 2;
      if (stats->bytes_sent != 0) return 3;  // only the offer and done travel, not counted as data
      PoisonDestinations(r);
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  if (codes[1] == 6) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// bf16 of a whole number below 256 (exact): the top half of its float's bits.
uint16_t ExactBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// MakePackedPlan's destinations in bf16: "left" holds source columns 0..3 of its 4 x 8 fp32
// matrix, "right" columns 4..7; the source holds Value(0, i) = i.
bool VerifyNarrowedHalves(const Rank& r) {
  for (int half = 0; half < 2; ++half) {
    uint16_t got[16];
    std::memcpy(got, r.memory.destination[static_cast<size_t>(half)].base, sizeof(got));
    for (int row = 0; row < 4; ++row) {
      for (int col = 0; col < 4; ++col) {
        if (got[row * 4 + col] != ExactBf16(static_cast<float>(row * 8 + half * 4 + col))) return false;
      }
    }
  }
  return true;
}

// A same-node message whose Pack narrows (fp32 into bf16 staging), refit three times. With
// executor.convert_on_sender=always the sender runs its Pack and offers its staging slot, and the
// receiver copies the 64 bf16 bytes from it (a packed read, through process_vm_readv of the
// sender's arena); with never, or auto on host memory (whose offers name no GPU), the receiver
// reads the fp32 source and converts. The same bf16 values arrive either way.
void RunNarrowingRead(const std::string& choice, bool packs) {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  auto codes = RunRanks(2, 60, [&](int rank, int port) {
    auto joined = Join(rank, 2, port, {"executor.convert_on_sender=" + choice}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok() && stats.status().code() == StatusCode::kFailedPrecondition &&
          stats.status().message().find("process_vm_readv from peer") != std::string::npos) {
        return 6;  // ptrace access between processes is denied on this machine
      }
      if (!stats.ok()) return Report(stats.status());
      if (rank == 1 && !VerifyNarrowedHalves(r)) return 2;
      if (rank == 1 && stats->packed_reads != (packs ? 1 : 0)) return 3;
      if (rank == 1 && packs && stats->bytes_read_direct != 64) return 4;
      // The receiver's only copy is its read: its Unpack is elided either way.
      if (rank == 1 && stats->bytes_copied != stats->bytes_read_direct) return 9;
      if (rank == 0 && stats->packed_offers_sent != (packs ? 1 : 0)) return 7;
      if (stats->bytes_sent != 0) return 8;  // direct either way: no staged message
      PoisonDestinations(r);
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  if (codes[1] == 6) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(ExecutorTest, ANarrowingMessageIsReadFromTheSendersPackedSlot) { RunNarrowingRead("always", true); }
TEST(ExecutorTest, ANarrowingMessageIsConvertedWhileReadWhenNeverPacked) { RunNarrowingRead("never", false); }
TEST(ExecutorTest, AutoConvertsWhileReadingHostMemory) { RunNarrowingRead("auto", false); }

TEST(ExecutorTest, DirectReaderOfADeadSenderFailsNamingThePeer) {
  TransferPlan plan = ThreeRankPlan(LinkClass::kSameNode);
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    // Rank 0 hosts the store: everyone has joined before it goes, so only the refit sees it die.
    if (!FinalBarrier(*r.rendezvous.store, "joined", rank, 3, 0, Deadline::AfterSeconds(20)).ok()) return 9;
    if (rank == 0) ::_exit(0);  // the sender dies before offering anything
    if (rank == 2) {  // stays alive and out of the refit, so rank 1's only failing peer is rank 0
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return 0;
    }
    AllocateHost(r, plan, rank, true);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (stats.ok()) return 10;
    std::string message = stats.status().message();
    std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
    return message.find("rank 0 died") != std::string::npos ? 7 : 8;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 7) << "rank 1 waits on rank 0's offer";
}

TEST(ExecutorTest, PeerThatExitsFailsTheOthersNamingOpPeerAndTransport) {
  TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (rank == 2) ::_exit(0);  // dies without running its part
    AllocateHost(r, plan, rank);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    // Rank 0 only sends: its 1 MiB messages may all fit in socket buffers before rank 2 dies.
    if (stats.ok()) return rank == 0 ? 0 : 10;
    std::string message = stats.status().message();
    std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
    // Whatever this rank saw first (its own link to rank 2, or rank 0 aborting), the error names
    // the rank at fault.
    return message.find("rank 2 died") != std::string::npos ? 7 : 8;
  });
  EXPECT_TRUE(codes[0] == 0 || codes[0] == 7) << codes[0];
  EXPECT_EQ(codes[1], 7) << "rank 1 waits on a message from the dead rank 2";
  EXPECT_EQ(codes[2], 0);
}

TEST(ExecutorTest, DeadlineNamesTheStuckReceive) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.destination_buffers = {{0, "d", 1024}};
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kNetwork, .rank = 0, .peer = 1, .message = 9,
          .bytes = 1024};
  recv.SetData(ByteRange(Space::kDestination, 0, 0, 1024));
  plan.AddOp(recv);
  auto codes = RunRanks(2, 30, [&](int rank, int port) {
    auto joined = Join(rank, 2, port);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    AllocateHost(r, plan, rank);
    if (rank == 1) {  // alive but never sends
      return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
    }
    auto started = std::chrono::steady_clock::now();
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(0.5));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    (void)FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20));
    if (stats.ok()) return 10;
    std::fprintf(stderr, "%s\n", stats.status().ToString().c_str());
    bool named = stats.status().code() == StatusCode::kDeadlineExceeded &&
                 stats.status().message().find("recv of message 9 from peer 1 over tcp") !=
                     std::string::npos;
    return named && took < 5 ? 7 : 8;
  });
  EXPECT_EQ(codes, (std::vector<int>{7, 0}));
}

}  // namespace
}  // namespace ferry
