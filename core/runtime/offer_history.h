// OfferHistory: the direct-read offers this rank sent and took in earlier runs of a plan, so that
// a refit repeated every step exchanges a digest per message instead of a description of every
// source buffer it reads (core/runtime/direct_read.h, "abbreviated" offers).
//
// A message of a Megatron layout with per-expert weights reads thousands of source buffers: its
// full offer is ~120 bytes a buffer (megabytes a message) to write, send, decode, map and check
// against every region, every step, although nothing in it changed. The history keeps, per direct
// read of a plan analysis (DirectReadCache generation and index):
//   sender side   the full offer as last encoded, the source buffers it described (base, size,
//                 kind, device: a change means encoding again) and whether the receiver took it;
//   receiver side the full offer last taken (owner, digest, buffers) and the copies resolved from
//                 it against this rank's destination buffers (re-resolved when those change).
// The sender sends an abbreviated offer only for an offer the receiver acknowledged taking; the
// receiver answers an abbreviated offer it holds nothing for (a new process, a forgotten history)
// by asking for the full offer again (rank_run.cc), so the two histories never need to agree.
//
// Entries point into PeerMappings/PeerCudaMappings: Clear() whenever those are cleared
// (Executor::ForgetRegistrations) or the communicator's epoch changes.
// Thread-safety: one thread at a time (the executor's).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/copy_pool.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/transport.h"

namespace ferry {

// What identifies a buffer's memory for an offer: a change means describing it again.
struct MemorySnapshot {
  const void* base = nullptr;
  int64_t bytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;
  int shared_fd = -1;
  int64_t shared_offset = 0;

  static MemorySnapshot Of(const MemoryDesc& m) {
    return {m.base, m.bytes, m.kind, m.device, m.shared_fd, m.shared_offset};
  }
  bool operator==(const MemorySnapshot&) const = default;
};

class OfferHistory {
 public:
  // Analyses whose entries are kept (as DirectReadCache keeps analyses); older ones are dropped.
  static constexpr size_t kGenerations = 4;

  struct Sent {
    std::vector<MemorySnapshot> sources;  // by entry of DirectRead::source_buffers
    std::vector<uint8_t> full;            // the full offer, empty until encoded
    uint64_t digest = 0;
    bool taken = false;           // the receiver acknowledged this full offer
    bool pack_requested = false;  // the receiver asked for the message packed (kPackAnswer)
    uint64_t arena_serial = 0;    // a packed offer's: the staging arena allocation it described
    GpuUuid gpu{};                // the GPU the offer names (OfferHeader::gpu)
  };
  // A mapping the taken copies read through (one per shared file or CUDA allocation): buffer
  // `buffer` of the offer, mapped at `at`. Mapping it again each run keeps it from being swept
  // (PeerMappings::Sweep) and tells whether it moved.
  struct Pin {
    size_t buffer = 0;
    const char* at = nullptr;
  };
  struct Taken {
    bool valid = false;
    OfferHeader header;                       // owner and digest of the full offer taken
    std::vector<PeerBuffer> buffers;          // its entries
    // The destination buffers the copies write, as they were when resolved (buffer, memory).
    std::vector<std::pair<int, MemorySnapshot>> destination;
    std::vector<MemorySnapshot> slots;        // DirectRead::to_slots' memory, likewise
    std::vector<Pin> pins;
    int device = -1;                          // where CUDA allocations were opened
    std::vector<CopyEnds> ends;               // one per DirectRead::reads entry
    int64_t bytes = 0;
    bool on_gpu = false;
  };

  // The sender-side and receiver-side entries of entry `read` (HistoryIndex: two a direct read,
  // one per kind of offer) of analysis `generation`,
  // created empty on first use. References stay valid until the next call of either.
  Sent& SentOf(uint64_t generation, int read);
  Taken& TakenOf(uint64_t generation, int read);
  // Drops everything when `epoch` differs from the epoch of the entries kept.
  void ForEpoch(uint64_t epoch);
  void Clear() { generations_.clear(); }

 private:
  struct Generation {
    uint64_t id = 0;
    std::vector<Sent> sent;    // by direct read index
    std::vector<Taken> taken;  // by direct read index
  };
  Generation& GenerationOf(uint64_t id);

  std::vector<Generation> generations_;  // most recent first
  uint64_t epoch_ = 0;
};

}  // namespace ferry
