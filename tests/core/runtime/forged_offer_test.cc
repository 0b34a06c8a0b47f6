// A direct-read offer that names a process other than the sender rank's own is refused by name:
// a third process (a child holding a memfd of secret bytes) named in an offer "from rank 0" must
// never be mapped or read into rank 1's destination, whether the offer points at its memfd or at
// its ordinary memory (process_vm_readv). The same offer naming rank 0's real process resolves.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/runtime/direct_read_protocol.h"
#include "core/runtime/peer_process.h"

namespace ferry {
namespace {

constexpr int64_t kBytes = 64;

// Rank 0 sends its source buffer 0 (kBytes) straight into rank 1's destination buffer 0.
TransferPlan OneMessagePlan() {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", kBytes}};
  plan.destination_buffers = {{1, "w", kBytes}};
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 3, .bytes = kBytes};
  send.SetData(ByteRange(Space::kSource, 0, 0, kBytes));
  plan.AddOp(send);
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 3, .bytes = kBytes};
  recv.SetData(ByteRange(Space::kDestination, 0, 0, kBytes));
  plan.AddOp(recv);
  return plan;
}

// Rank 1's verified view of rank 0, both ranks being threads of this process.
std::unique_ptr<PeerProcesses> VerifiedRank1() {
  std::unique_ptr<PeerProcesses> rank1;
  auto options = [](int rank, int peer) {
    PeerProcessOptions o;
    o.rank = rank;
    o.size = 2;
    o.epoch = 1;
    o.secret = "node-secret";
    o.socket_name = "ferry-test/" + std::to_string(::getpid()) + "/forged";
    o.peers = {peer};
    return o;
  };
  std::thread rank0([&] {
    auto p = PeerProcesses::Connect(options(0, 1), Deadline::AfterSeconds(10));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
  });
  auto p = PeerProcesses::Connect(options(1, 0), Deadline::AfterSeconds(10));
  rank0.join();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (p.ok()) rank1 = std::move(*p);
  return rank1;
}

TEST(ForgedOfferTest, AnOfferNamingAnotherProcessIsRefused) {
  auto secret = SharedHostMemory::Allocate(kBytes, "third-party");
  ASSERT_TRUE(secret.ok());
  std::memcpy(secret->data(), "THIRD-PARTY-SECRET", 18);
  const pid_t third = ::fork();  // shares the memfd's fd number and the buffer's address
  if (third == 0) {
    ::alarm(30);
    while (true) ::pause();
  }
  ASSERT_GT(third, 0);
  std::unique_ptr<PeerProcesses> verified = VerifiedRank1();
  const TransferPlan plan = OneMessagePlan();
  const std::vector<DirectRead> reads = FindDirectReads(plan, 1);
  std::vector<char> landed(kBytes, 0);
  const std::vector<MemoryDesc> destination = {{landed.data(), kBytes, MemoryKind::kHost, -1}};
  BufferDescriber describer;
  auto shared = describer.Describe(secret->desc());
  PeerBuffer ordinary = *shared;
  ordinary.shared_fd = -1;  // the child's copy of the bytes, read through process_vm_readv
  PeerMappings mappings;
  PeerCudaMappings cuda;
  PeerMemory peers{mappings, cuda, verified.get()};
  std::vector<uint8_t> offer(static_cast<size_t>(DirectReadOfferBytes(1)));
  for (const PeerBuffer& buffer : {*shared, ordinary}) {
    ASSERT_EQ(reads.size(), 1u);
    EncodeDirectReadOffer({third, ProcessIdentity::Self().boot_id}, {&buffer, 1}, offer);
    std::vector<CopyEnds> ends;
    bool on_gpu = false;
    auto forged = ResolveOffer(reads[0], offer, destination, 1, peers, ends, on_gpu);
    ASSERT_FALSE(forged.ok()) << "rank 1 would read process " << third << "'s memory";
    EXPECT_EQ(forged.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(forged.status().message().find("forged direct-read offer"), std::string::npos);
    EXPECT_NE(forged.status().message().find("names process " + std::to_string(third) + ", but rank 0 is process " +
                                             std::to_string(::getpid())),
              std::string::npos)
        << forged.status().ToString();
    EXPECT_EQ(mappings.size(), 0u) << "the third process's memfd was mapped";
  }
  // The honest offer, from rank 0's own process, resolves to rank 0's memory.
  EncodeDirectReadOffer(ProcessIdentity::Self(), {&*shared, 1}, offer);
  std::vector<CopyEnds> ends;
  bool on_gpu = false;
  auto honest = ResolveOffer(reads[0], offer, destination, 1, peers, ends, on_gpu);
  ASSERT_TRUE(honest.ok()) << honest.status().ToString();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(std::memcmp(ends[0].from, "THIRD-PARTY-SECRET", 18), 0);

  // Through the history: the full offer is kept, and the same offer abbreviated gets its copies
  // back; an abbreviated offer naming the third process is refused like a full one, and one of a
  // digest (or plan analysis) not held gets nothing, so the receiver asks for the full offer.
  OfferHistory history;
  const uint64_t digest = EncodeDirectReadOffer(ProcessIdentity::Self(), {&*shared, 1}, offer);
  auto full = TakeOffer(7, 0, reads[0], offer, destination, 1, peers, history);
  ASSERT_TRUE(full.ok() && *full != nullptr) << full.status().ToString();
  std::vector<uint8_t> brief(static_cast<size_t>(AbbreviatedOfferBytes()));
  EncodeAbbreviatedOffer(ProcessIdentity::Self(), 1, digest, brief);
  auto held = TakeOffer(7, 0, reads[0], brief, destination, 1, peers, history);
  ASSERT_TRUE(held.ok() && *held != nullptr) << held.status().ToString();
  ASSERT_EQ((*held)->ends.size(), 1u);
  EXPECT_EQ((*held)->ends[0].from, ends[0].from);
  // This rank's destination buffer moved: the held offer's copies are resolved again, to it.
  std::vector<char> moved(kBytes, 0);
  const std::vector<MemoryDesc> elsewhere = {{moved.data(), kBytes, MemoryKind::kHost, -1}};
  auto again = TakeOffer(7, 0, reads[0], brief, elsewhere, 1, peers, history);
  ASSERT_TRUE(again.ok() && *again != nullptr) << again.status().ToString();
  EXPECT_EQ((*again)->ends[0].to, moved.data());
  EncodeAbbreviatedOffer({third, ProcessIdentity::Self().boot_id}, 1, digest, brief);
  auto forged = TakeOffer(7, 0, reads[0], brief, destination, 1, peers, history);
  EXPECT_EQ(forged.status().code(), StatusCode::kFailedPrecondition) << forged.status().ToString();
  EncodeAbbreviatedOffer(ProcessIdentity::Self(), 1, digest ^ 1, brief);
  auto unknown = TakeOffer(7, 0, reads[0], brief, destination, 1, peers, history);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, nullptr);
  EncodeAbbreviatedOffer(ProcessIdentity::Self(), 1, digest, brief);
  auto other_plan = TakeOffer(8, 0, reads[0], brief, destination, 1, peers, history);
  ASSERT_TRUE(other_plan.ok());
  EXPECT_EQ(*other_plan, nullptr);
  ::kill(third, SIGKILL);
  ::waitpid(third, nullptr, 0);
}

TEST(ForgedOfferTest, WithoutVerifiedPeersNoOfferResolves) {
  const TransferPlan plan = OneMessagePlan();
  const std::vector<DirectRead> reads = FindDirectReads(plan, 1);
  ASSERT_EQ(reads.size(), 1u);
  std::vector<char> landed(kBytes, 0), source(kBytes, 1);
  const std::vector<MemoryDesc> destination = {{landed.data(), kBytes, MemoryKind::kHost, -1}};
  PeerBuffer buffer;
  buffer.address = reinterpret_cast<uint64_t>(source.data());
  buffer.bytes = kBytes;
  std::vector<uint8_t> offer(static_cast<size_t>(DirectReadOfferBytes(1)));
  EncodeDirectReadOffer(ProcessIdentity::Self(), {&buffer, 1}, offer);
  PeerMappings mappings;
  PeerCudaMappings cuda;
  PeerMemory peers{mappings, cuda, nullptr};
  std::vector<CopyEnds> ends;
  bool on_gpu = false;
  auto resolved = ResolveOffer(reads[0], offer, destination, 1, peers, ends, on_gpu);
  EXPECT_EQ(resolved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(resolved.status().message().find("rank 0"), std::string::npos) << resolved.status().ToString();
}

}  // namespace
}  // namespace ferry
