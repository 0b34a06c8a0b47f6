// The executor on CUDA memory, over real processes (tests/core/runtime/executor_testutil.h): the
// three-rank plan with every buffer in device memory. Over network links its Pack and Unpack run
// as kernels into and out of pinned staging, and the Recv straight into a CUDA region, the Forward
// from one, go through bounce slots; on one node message 1 goes as a GPU direct read through CUDA
// IPC, and a direct read straight into device memory holds no staging. Needs a GPU: where there is
// none these report themselves SKIPPED, and one more test checks that CUDA memory then fails
// cleanly.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "core/cuda/pointer.h"
#include "core/cuda/vmm.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/direct_read_protocol.h"
#include "core/runtime/executor.h"
#include "tests/core/plan/plan_fixture.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

// Asked in a child process: the test process itself must not initialise CUDA before forking ranks.
bool HaveGpu() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(cuda::DeviceCount() > 0 ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Every buffer of this rank in its own cudaMalloc allocation: sources hold the tensor, the
// destinations -1.
// With `vmm`, each side's buffers of the rank lie in one range of 2 MiB cuMem mappings (as
// PyTorch's expandable segments hold tensors), the first starting 4 KiB before a mapping's end so
// that buffers straddle mappings; the ranges are never freed (the process exits after the test).
Status AllocateDevice(Rank& r, const TransferPlan& plan, int rank, bool vmm = false) {
  auto fill = [&](const BufferTable& specs, std::vector<MemoryDesc>& out, bool source) -> Status {
    char* next = nullptr;
    if (vmm) {
      int64_t total = 0;
      for (const BufferTable::Entry& spec : specs) total += spec.rank == rank ? spec.bytes : 0;
      FERRY_ASSIGN_OR_RETURN(cuda::VmmAllocation block, cuda::AllocateVmm((2 << 20) + total, 2 << 20, 0));
      next = static_cast<char*>(block.base) + (2 << 20) - 4096;
    }
    for (const BufferTable::Entry& spec : specs) {
      if (spec.rank != rank) {
        out.push_back({});
        continue;
      }
      void* p = next;
      if (vmm) {
        next += spec.bytes;
      } else {
        FERRY_ASSIGN_OR_RETURN(p, cuda::DeviceAlloc(spec.bytes));
      }
      std::vector<float> host(static_cast<size_t>(spec.bytes / 4), -1.0f);
      for (int64_t i = 0; source && i < spec.bytes / 4; ++i) host[i] = Value(i / kCols, i % kCols);
      FERRY_RETURN_IF_ERROR(cuda::CopyToDevice(p, host.data(), spec.bytes));
      out.push_back({p, spec.bytes, MemoryKind::kCuda, 0});
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(fill(plan.source_buffers, r.memory.source, true));
  return fill(plan.destination_buffers, r.memory.destination, false);
}

// Copies destination `buffer` down and compares element i with expected(i); then poisons it.
bool CheckAndPoison(const Rank& r, int buffer, const std::function<float(int64_t)>& expected) {
  const MemoryDesc& d = r.memory.destination[buffer];
  std::vector<float> host(static_cast<size_t>(d.bytes / 4));
  if (!cuda::CopyToHost(host.data(), d.base, d.bytes).ok()) return false;
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i] != expected(static_cast<int64_t>(i))) return false;
  }
  std::fill(host.begin(), host.end(), -1.0f);
  return cuda::CopyToDevice(d.base, host.data(), d.bytes).ok();
}

bool VerifyDevice(const Rank& r, int rank) {
  if (rank == 0) return CheckAndPoison(r, 0, [](int64_t i) { return Value(i / kCols, i % kCols); });
  auto left = [](int64_t i) { return Value(i / 512, i % 512); };
  auto right = [](int64_t i) { return Value(i / 512, 512 + i % 512); };
  if (rank == 1) return CheckAndPoison(r, 1, left) && CheckAndPoison(r, 3, right);
  return CheckAndPoison(r, 2, right);
}

// Rank 1's destination buffers in new allocations (the old ones stay allocated, so the new
// addresses differ): the next refit must write the new ones, not where earlier runs wrote.
Status MoveDestinations(Rank& r) {
  for (int b : {1, 3}) {
    MemoryDesc& d = r.memory.destination[b];
    FERRY_ASSIGN_OR_RETURN(void* p, cuda::DeviceAlloc(d.bytes));
    std::vector<float> poison(static_cast<size_t>(d.bytes / 4), -1.0f);
    FERRY_RETURN_IF_ERROR(cuda::CopyToDevice(p, poison.data(), d.bytes));
    d.base = p;
  }
  return Status::Ok();
}

// Three refits of the three-rank plan on CUDA memory; `one_node` makes message 1 a direct read;
// `move` gives rank 1 new destination buffers before the third, which its kernels (an Unpack, or
// the direct read) must then write.
void RunOnDevice(bool one_node, bool move = false, bool vmm = false) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the executor's CUDA paths are not exercised";
  TransferPlan plan = ThreeRankPlan(one_node ? LinkClass::kSameNode : LinkClass::kNetwork);
  auto codes = RunRanks(3, 90, [&](int rank, int port) {
    auto joined = Join(rank, 3, port, {"executor.staging_budget=1100KiB"}, one_node);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (Status s = AllocateDevice(r, plan, rank, vmm); !s.ok()) return Report(s);
    for (int refit = 0; refit < 3; ++refit) {
      if (move && refit == 2 && rank == 1) {
        if (Status s = MoveDestinations(r); !s.ok()) return Report(s);
      }
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      if (!VerifyDevice(r, rank)) return 2;
      const int64_t direct = rank == 1 && one_node ? kRows * 512 * 4 : 0;
      if (stats->bytes_read_direct != direct) return 3;
      // Staging is pinned and bounded: the bounce slots count against the budget too.
      if (stats->peak_staging_bytes > 1100 * 1024) return 4;
      // Kernel descriptors (rank 0's Pack and Copy kernels, rank 1's Unpack or direct read) are
      // built by the first refit and where a region moved; other refits launch the tables
      // already on the device.
      const bool rebuilt = (refit == 0 && rank < 2) || (move && refit == 2 && rank == 1);
      if ((stats->gpu_tables_built > 0) != rebuilt) return 6;
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(ExecutorCudaTest, PackUnpackBounceAndCopyOnDeviceMemoryOverTcp) { RunOnDevice(false); }

TEST(ExecutorCudaTest, UnpackIntoMovedDestinationsWritesTheNewBuffers) { RunOnDevice(false, true); }

// Sources and destinations in VMM mappings, buffers straddling them: the same-node message is a
// direct read of the sender's mappings, exported as fds and mapped side by side by the reader.
TEST(ExecutorCudaTest, DirectReadOfVmmBuffersThatSpanMappings) { RunOnDevice(true, false, true); }

// Rank 0's two source buffers go to rank 1's two destination buffers in one same-node message:
// one direct read of both.
TransferPlan TwoBufferPlan() {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 2;
  const int64_t half = kRows * 512 * 4;
  plan.source_buffers = {{0, "a", half}, {0, "b", half}};
  plan.destination_buffers = {{1, "a", half}, {1, "b", half}};
  const int out = plan.AddSlot(0, 2 * half), in = plan.AddSlot(1, 2 * half);
  Op pack{.kind = OpKind::kPack, .rank = 0, .bytes = 2 * half};
  const int packed = plan.AddOp(pack, {},
                                {{Fp32Matrix(Space::kSource, 0, 0, kRows, 512, 512),
                                  Fp32Matrix(Space::kStaging, out, 0, kRows, 512, 512)},
                                 {Fp32Matrix(Space::kSource, 1, 0, kRows, 512, 512),
                                  Fp32Matrix(Space::kStaging, out, half, kRows, 512, 512)}});
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 1, .bytes = 2 * half};
  send.SetData(ByteRange(Space::kStaging, out, 0, 2 * half));
  plan.AddOp(send, {packed});
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 1, .bytes = 2 * half};
  recv.SetData(ByteRange(Space::kStaging, in, 0, 2 * half));
  const int received = plan.AddOp(recv);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = 2 * half};
  plan.AddOp(unpack, {received},
             {{Fp32Matrix(Space::kStaging, in, 0, kRows, 512, 512), Fp32Matrix(Space::kDestination, 0, 0, kRows, 512, 512)},
              {Fp32Matrix(Space::kStaging, in, half, kRows, 512, 512),
               Fp32Matrix(Space::kDestination, 1, 0, kRows, 512, 512)}});
  return plan;
}

// Two source buffers in one range of VMM mappings, sharing the mapping between them, are read
// through one export of their joined span: the reader maps it once, not once per buffer.
TEST(ExecutorCudaTest, VmmBuffersSharingMappingsAreMappedOnce) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the executor's CUDA paths are not exercised";
  TransferPlan plan = TwoBufferPlan();
  auto codes = RunRanks(2, 90, [&](int rank, int port) {
    auto joined = Join(rank, 2, port, {}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (Status s = AllocateDevice(r, plan, rank, /*vmm=*/true); !s.ok()) return Report(s);
    const auto element = [](int64_t i) { return Value(i / kCols, i % kCols); };
    for (int refit = 0; refit < 2; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      if (rank == 1) {
        if (!CheckAndPoison(r, 0, element) || !CheckAndPoison(r, 1, element)) return 2;
        if (stats->bytes_read_direct != 2 * kRows * 512 * 4) return 3;
        if (stats->peer_cuda_mappings != 1) return 10 + stats->peer_cuda_mappings;
      }
    }
    return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Where there is no GPU, a run given CUDA memory fails at once on every rank, naming the missing
// device, before any op touches the (here fake) device addresses.
TEST(ExecutorCudaTest, WithoutAGpuCudaMemoryFailsNamingTheDevice) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is visible: this checks the machine without one";
  TransferPlan plan = ThreeRankPlan();
  auto codes = RunRanks(3, 60, [&](int rank, int port) {
    auto joined = Join(rank, 3, port);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    static char fake[1];
    for (const BufferTable::Entry& spec : plan.source_buffers) {
      r.memory.source.push_back(spec.rank == rank ? MemoryDesc{fake, spec.bytes, MemoryKind::kCuda, 0}
                                                  : MemoryDesc{});
    }
    for (const BufferTable::Entry& spec : plan.destination_buffers) {
      r.memory.destination.push_back(
          spec.rank == rank ? MemoryDesc{fake, spec.bytes, MemoryKind::kCuda, 0} : MemoryDesc{});
    }
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(10));
    if (stats.ok()) return 2;
    // The first rank to fail aborts the communicator at set-up, so a rank may see its own
    // failure or that abort: either way the error names the missing device.
    const StatusCode code = stats.status().code();
    if ((code != StatusCode::kFailedPrecondition && code != StatusCode::kAborted) ||
        stats.status().message().find("CUDA device 0 does not exist") == std::string::npos) {
      return Report(stats.status());
    }
    // Rank 0 hosts the store: no rank leaves before every rank is past its own barriers.
    return FinalBarrier(*r.rendezvous.store, "done", rank, 3, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}
TEST(ExecutorCudaTest, SameNodeMessageIsOneKernelReadingThePeerThroughCudaIpc) { RunOnDevice(true); }

// A direct read's device work is kept across runs (core/runtime/gpu_read_tables.h): refits 2 and
// 3 reuse it, and when the receiver's buffers move it is built again for the new addresses.
TEST(ExecutorCudaTest, DirectReadIntoMovedDestinationsWritesTheNewBuffers) { RunOnDevice(true, true); }

// Rank 0 sends its whole source tensor over a same-node link straight into rank 1's destination
// buffer, both in CUDA memory, over tcp, which cannot move CUDA memory: staged, the receive would
// go through a bounce slot of the message's 2 MiB. As a direct read the receiver's kernel reads the
// sender's memory, so neither rank holds any staging, and a budget of 4 KiB runs it.
TEST(ExecutorCudaTest, ADirectReadIntoDeviceMemoryHoldsNoStaging) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the executor's CUDA paths are not exercised";
  const int64_t bytes = int64_t{kRows} * kCols * 4;
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", bytes}};
  plan.destination_buffers = {{1, "w", bytes}};
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 0,
          .bytes = bytes};
  send.SetData(ByteRange(Space::kSource, 0, 0, bytes));
  plan.AddOp(send);
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 0,
          .bytes = bytes};
  recv.SetData(ByteRange(Space::kDestination, 0, 0, bytes));
  plan.AddOp(recv);
  auto codes = RunRanks(2, 60, [&](int rank, int port) {
    auto joined = Join(rank, 2, port, {"executor.staging_budget=4KiB"}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (Status s = AllocateDevice(r, plan, rank); !s.ok()) return Report(s);
    auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
    if (!stats.ok()) return Report(stats.status());
    if (rank == 1 && !CheckAndPoison(r, 0, [](int64_t i) { return Value(i / kCols, i % kCols); })) {
      return 2;
    }
    if (stats->bytes_read_direct != (rank == 1 ? bytes : 0)) return 3;
    if (stats->peak_staging_bytes != 0 || stats->staging_arena_bytes != 0) return 4;
    return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// bf16 of a whole number below 256 (exact): the top half of its float's bits.
uint16_t ExactBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// MakePackedPlan's bf16 destinations on the device: "left" holds source columns 0..3 of the 4 x 8
// fp32 source (Value(0, i) = i), "right" columns 4..7.
bool NarrowedHalvesArrived(const Rank& r) {
  for (int half = 0; half < 2; ++half) {
    uint16_t got[16];
    if (!cuda::CopyToHost(got, r.memory.destination[static_cast<size_t>(half)].base, sizeof(got)).ok()) return false;
    for (int i = 0; i < 16; ++i) {
      if (got[i] != ExactBf16(static_cast<float>((i / 4) * 8 + half * 4 + i % 4))) return false;
    }
  }
  return true;
}

// The receiver's choice on `auto`: ask for the message packed only when the offer names another
// GPU than the one it read into (here a made-up UUID against this GPU's own).
bool AsksToPackOnlyForAnotherGpu() {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  const std::vector<DirectRead> found = FindDirectReads(plan, 1);
  Result<GpuUuid> own = cuda::DeviceUuid(0);
  if (found.size() != 1 || !own.ok()) return false;
  OfferHistory::Taken taken;
  taken.device = 0;
  taken.header.gpu = *own;
  const bool same = AsksToPack(found[0], taken);
  taken.header.gpu[0] ^= 0xff;
  const bool other = AsksToPack(found[0], taken);
  taken.header.packed = true;
  const bool already = AsksToPack(found[0], taken);
  return !same && other && !already;
}

// Two ranks on this one GPU, a same-node message whose Pack narrows fp32 into bf16, three refits.
// With executor.convert_on_sender=always the sender's Pack kernel converts into its device staging
// and the receiver's kernel copies the bf16 bytes from it through CUDA IPC (a packed read); with
// auto both ranks use one GPU, so the receiver never asks and converts while reading.
void RunNarrowingOnDevice(const std::string& choice, bool packs) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the executor's CUDA paths are not exercised";
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  auto codes = RunRanks(2, 60, [&](int rank, int port) {
    auto joined = Join(rank, 2, port, {"executor.convert_on_sender=" + choice}, /*one_node=*/true);
    if (!joined.ok()) return Report(joined.status());
    Rank& r = **joined;
    if (Status s = AllocateDevice(r, plan, rank); !s.ok()) return Report(s);
    for (int refit = 0; refit < 3; ++refit) {
      auto stats = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
      if (!stats.ok()) return Report(stats.status());
      if (rank == 1 && !NarrowedHalvesArrived(r)) return 2;
      if (rank == 1 && stats->packed_reads != (packs ? 1 : 0)) return 3;
      if (rank == 0 && stats->packed_offers_sent != (packs ? 1 : 0)) return 4;
      if (rank == 0 && packs && stats->staging_arena_bytes == 0) return 6;
    }
    if (rank == 1 && !AsksToPackOnlyForAnotherGpu()) return 7;
    return FinalBarrier(*r.rendezvous.store, "done", rank, 2, 0, Deadline::AfterSeconds(20)).ok() ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(ExecutorCudaTest, ANarrowingMessageIsReadFromTheSendersDeviceStaging) { RunNarrowingOnDevice("always", true); }
TEST(ExecutorCudaTest, OnOneGpuAutoConvertsWhileReading) { RunNarrowingOnDevice("auto", false); }

}  // namespace
}  // namespace ferry
