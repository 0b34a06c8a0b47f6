// The direct-read exchange as the executor runs it: which part each of this rank's ops plays, the
// control buffer the offers travel in, writing an offer, and turning a received offer into checked
// copies. What a direct read is and which messages qualify: core/runtime/direct_read.h.
//
// Per message (both ranks derive the same list from the plan, FindDirectReads):
//   sender, its Send (role kOffer): posts a receive of up to kAnswerBytes for the receiver's
//     answer (AckTag), then sends the *offer* (Tag) from the message's control slot: abbreviated
//     when the receiver took this same offer in an earlier run (offer_history.h), else full; of
//     its source buffers, or, when it packs the message (DirectRead::packed, after its Pack ran
//     with role kStaged), of the staging slot holding it. When both requests completed: a 0-byte
//     answer is *done* (the receiver copied, so the source buffers stayed untouched while the
//     peer read them) and the Send completes; a kPackAnswer-byte answer is *done* with a request
//     to pack this message from the next run on (the receiver is on another GPU); a
//     kFullOfferAnswer-byte answer asks for the full offer, which the sender then sends (once)
//     and waits again.
//   receiver, its Recv (role kRead): receives the offer (Tag) into the message's control slot,
//     checks its size (CheckOfferSize), takes it (TakeOffer: resolved into checked copies, or
//     those of the full offer it holds for an abbreviated one), runs the copies, then sends a
//     0-byte *done* (AckTag); the Recv completes when *done* has gone out. An abbreviated offer
//     it holds nothing for is answered with the 1-byte request, and the full offer awaited.
//   the message's Pack and Unpack (role kElided): complete without work.
// Other ops (kStaged) take the staged path: staging slots and ordinary sends and receives.
//
// Thread-safety: none; everything here belongs to the executor thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/runtime/copy_pool.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/offer_history.h"
#include "core/runtime/op_copies.h"
#include "core/runtime/peer_cuda_memory.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/peer_process.h"
#include "core/runtime/transport.h"

namespace ferry {

enum class DirectRole : uint8_t { kStaged, kElided, kOffer, kRead };

// The receiver's answer to an offer: 0 bytes (done), kFullOfferAnswer (send the full offer) or
// kPackAnswer (done; pack this message from the next run on); at most kAnswerBytes.
inline constexpr int64_t kFullOfferAnswer = 1;
inline constexpr int64_t kPackAnswer = 2;
inline constexpr int64_t kAnswerBytes = 2;

// FindDirectReads of the plans run last (at most kSize, most recent first), keyed by address and
// PlanFingerprint: callers that alternate a few plans (a refit and a probe) neither recompute nor
// free an analysis of thousands of messages on every run. Each entry also keeps its plan's
// OpCopies (op_copies.h), filled by the executor as its ops first run.
class DirectReadCache {
 public:
  static constexpr size_t kSize = 4;
  // The direct reads of `rank` in `plan`, computed on a miss when `analyse` (else none: the entry
  // then only gives the plan its generation). One executor passes the same `analyse` every call
  // (executor.direct_intra_node). Valid until the next call.
  const std::vector<DirectRead>& Find(const TransferPlan& plan, int rank, bool analyse);
  // Which plan the last Find was for: a number of this cache's that no other plan (address and
  // fingerprint) had or will have while cached (what OfferHistory and GpuReadTables key by).
  uint64_t generation() const { return entries_.empty() ? 0 : entries_.front().generation; }
  // The OpCopies of the plan of the last Find, by the op's index among the rank's ops (null: not
  // analysed yet); the caller sizes and fills it. Valid until the next Find.
  std::vector<std::unique_ptr<OpCopies>>& op_copies() { return entries_.front().op_copies; }

 private:
  struct Entry {
    const TransferPlan* plan;
    uint64_t fingerprint;
    uint64_t generation;
    std::vector<DirectRead> reads;
    std::vector<std::unique_ptr<OpCopies>> op_copies;
  };
  std::vector<Entry> entries_;
  uint64_t next_generation_ = 1;
};

// This rank's part in a run's direct reads, by local op index (the op's index in
// TransferPlan::OpsOfRank), and each message's slot in the control buffer: 64-byte aligned,
// LargestOfferBytes long followed by kAnswerBytes for the answer, one per direct read.
struct DirectReadRoles {
  std::vector<DirectRole> role;         // by local op index
  std::vector<int> direct_of;           // by local op index: index in the direct reads, or -1
  std::vector<int64_t> control_offset;  // by direct read
  std::vector<char> packs;              // by direct read: this rank sends it packed this run
  int64_t control_bytes = 0;            // the control buffer's size

  // `local` maps this rank's op ids to local indexes; `num_ops` is their number.
  static DirectReadRoles Assign(const std::vector<DirectRead>& directs, int rank,
                                const std::unordered_map<int, int>& local, int num_ops);
  // The sender packs direct read `k` (which has a packed read) this run: its Pack runs staged.
  void Pack(const std::vector<DirectRead>& directs, int k, const std::unordered_map<int, int>& local);
};

// The OfferHistory entry of direct read `index`'s offer of either kind.
inline int HistoryIndex(int index, bool packed) { return 2 * index + (packed ? 1 : 0); }

// Sender: writes offers of this rank's source buffers, describing each buffer at most once per run
// and only when the offer's history (kept across runs) does not hold it encoded already.
class OfferWriter {
 public:
  // `source` is the run's source memory (RankMemory::source); it, `cuda_exports` and `history`
  // (the executor's, kept across runs) must outlive the writer.
  OfferWriter(const std::vector<MemoryDesc>& source, int rank, CudaExports& cuda_exports,
              OfferHistory& history)
      : source_(source), rank_(rank), cuda_exports_(cuda_exports), history_(history) {}

  // Writes the offer of `read`, direct read `index` of analysis `generation`, into `slot`, which
  // must hold LargestOfferBytes(read) bytes, and returns its size: the abbreviated offer when the
  // receiver acknowledged this same full offer before and `full` is false, else the full one.
  // With `packed` (the memory of the staging slot holding the packed message, placed in arena
  // allocation number `arena_serial`), the offer of read.packed, else of the source buffers.
  // Fails when a buffer has no memory on this rank or cannot be described (CUDA memory not from
  // cudaMalloc).
  Result<int64_t> Write(uint64_t generation, int index, const DirectRead& read, bool full,
                        std::span<uint8_t> slot, const MemoryDesc* packed = nullptr,
                        uint64_t arena_serial = 0);
  // The receiver answered *done* to the offer last written for (generation, index), asking for
  // the message packed from now on when `pack`.
  void Acknowledged(uint64_t generation, int index, bool packed, bool pack);
  // Whether the receiver of direct read `index` asked for it packed (kPackAnswer).
  bool PackRequested(uint64_t generation, int index);

 private:
  Status Encode(const DirectRead& read, OfferHistory::Sent& sent);
  Status EncodePacked(const MemoryDesc& slot, OfferHistory::Sent& sent);

  const std::vector<MemoryDesc>& source_;
  const int rank_;
  std::vector<PeerBuffer> described_;  // by source buffer, once is_described_
  std::vector<char> is_described_;
  BufferDescriber describer_;
  CudaExports& cuda_exports_;
  OfferHistory& history_;
};

// Receiver: an offer of `received` bytes must be exactly a full size (of the read, or of its
// packed read) or the abbreviated size both ranks expect for `read`; anything else means the
// ranks disagree about direct reads.
Status CheckOfferSize(const DirectRead& read, int64_t received);

// A peer's memory as this process reaches it: host files mapped, CUDA allocations opened, and
// which process each same-node peer rank is (kernel-verified; null when none was verified).
struct PeerMemory {
  PeerMappings& host;
  PeerCudaMappings& cuda;
  const PeerProcesses* processes;
};

// Where a receiver's direct read writes: this rank's destination buffers (by index) and the
// staging slots of DirectRead::to_slots, in that order, as placed in its arena for this run.
// Views; the caller keeps both alive for the call.
struct ReadTargets {
  const std::vector<MemoryDesc>& destination;
  std::span<const MemoryDesc> slots;
  // By slot (index into read.to_slots), nonzero for a twin the receiver elided because its reads
  // quantize every block of it (quantizing_read.h): no copy writes it, so a copy into it is
  // checked against the slot's bytes and gets no destination address (CopyEnds::to null).
  std::span<const char> elided = {};

  bool Elided(const DirectRead::Read& r) const {
    return r.to_slot >= 0 && static_cast<size_t>(r.to_slot) < elided.size() && elided[static_cast<size_t>(r.to_slot)];
  }

  // The memory a direct read's copy `r` writes, or null when the tables lack it.
  const MemoryDesc* Of(const DirectRead::Read& r) const {
    if (r.to_slot >= 0) {
      return static_cast<size_t>(r.to_slot) < slots.size() ? &slots[static_cast<size_t>(r.to_slot)] : nullptr;
    }
    return r.to_buffer >= 0 && static_cast<size_t>(r.to_buffer) < destination.size()
               ? &destination[static_cast<size_t>(r.to_buffer)]
               : nullptr;
  }
};

// Receiver: decodes the offer in `offer`, maps the sender's shared files or opens its CUDA
// allocations through `peers` (cached there), and checks every region of `read` against the
// offered buffers and this rank's `destination` memory (and `slots`, the memory of
// read.to_slots). Fills `ends` (one per copy of `read`, for
// read.geometries), sets `on_gpu` when they are device addresses (the copies then run as one
// kernel) and returns the bytes the copies write. Fails when the sender is on another machine, a
// region lies outside its buffer, or host and CUDA buffers mix, and refuses (kFailedPrecondition,
// naming the rank and both pids) an offer whose pid is not the sender rank's verified process
// (peers.processes): the memory read is always the authenticated sender's own. Copies from
// ordinary (unmapped) host memory get that pid in their CopyEnds: they run through
// process_vm_readv, and the caller checks the process is still alive after them
// (PeerProcesses::CheckAlive) before trusting what they read.
// (An abbreviated offer fails here: TakeOffer resolves those from the history.)
Result<int64_t> ResolveOffer(const DirectRead& read, std::span<const uint8_t> offer,
                             const std::vector<MemoryDesc>& destination, int rank,
                             PeerMemory& peers, std::vector<CopyEnds>& ends, bool& on_gpu,
                             std::span<const MemoryDesc> slots = {},
                             std::span<const char> elided_slots = {});

// Receiver, through the history: takes the offer of `read`, direct read `index` of analysis
// `generation`, with ResolveOffer's checks. A full offer is resolved and kept; an abbreviated one
// returns the copies kept for the full offer of the same kind and digest from the same
// (verified) process, resolved again if this rank's destination buffers or `slots` changed
// since, or null when none is kept (the caller asks for the full offer). A packed offer is
// resolved against read.packed (Taken::header.packed; its copies follow that read's geometries).
// `elided_slots`: ReadTargets::elided. The result is valid until the history's next use.
Result<const OfferHistory::Taken*> TakeOffer(uint64_t generation, int index,
                                             const DirectRead& read,
                                             std::span<const uint8_t> offer,
                                             const std::vector<MemoryDesc>& destination, int rank,
                                             PeerMemory& peers, OfferHistory& history,
                                             std::span<const MemoryDesc> slots = {},
                                             std::span<const char> elided_slots = {});

// Receiver, after copying an offer it took: whether to answer kPackAnswer. True when `read` has a
// packed read, `taken` was the wide one, and the GPU the sender's offer names is not the one this
// rank read into.
bool AsksToPack(const DirectRead& read, const OfferHistory::Taken& taken);

}  // namespace ferry
