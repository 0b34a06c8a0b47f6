// Direct reads: the executor's single-copy path for messages between ranks of one node.
//
// A plan moves bytes between ranks as Pack (source regions -> staging) -> Send -> Recv -> Unpack
// (staging -> destination regions), or with a contiguous source or destination region in place
// of the Pack or the Unpack. Between two processes of one machine each of those steps is a full
// copy. When the link is same-node and executor.direct_intra_node is on, the executor instead
// carries such a message as one copy made by the receiver, straight from the sender's source
// buffers into its own destination buffers (core/runtime/peer_memory.h):
//
//   sender:   Pack -> nothing; Send -> send an *offer* (its process identity and the addresses of
//             the source buffers the message reads), then wait for the receiver's *done* message
//   receiver: Recv -> receive the offer, copy every (source region -> destination region) pair of
//             the message, send *done*; Unpack -> nothing
//
// Both ends decide from the plan alone (FindDirectReads is deterministic), so they agree on which
// messages go direct without talking about it. The sender's Send completes only after the
// receiver's copy, so source buffers stay untouched while a peer reads them (the refit contract).
// The Unpack may also write staging slots of the receiver other than the one it reads, and a
// Recv may land in one: the bf16 twin a Quantize op then turns into block-scaled fp8
// (planner/block_quantize.h), which the receiver's copy then writes in its own staging arena.
// Messages relayed onward (Forward), messages between different nodes and messages whose Unpack
// applies an element function (a Convert pair with CopyPair::fn) keep the staged path.
//
// A message whose Pack narrows (bf16 into fp8, say) has two ways to go direct. The receiver may
// read the sender's wider elements and convert as it copies (one kernel, the sender does nothing);
// or the sender runs its Pack, converting into its staging slot, and offers that slot, from which
// the receiver copies the message's narrower bytes (a *packed* read, DirectRead::packed). On one
// GPU the first moves fewer bytes; between two GPUs the second moves half as many over NVLink.
// The sender chooses per run (executor.convert_on_sender), the receiver follows the offer's kind:
// on `auto` a receiver whose GPU differs from the one the sender's offer names answers its *done*
// with a request to pack, and the sender packs that message from its next run on.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/plan/plan.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/quantizing_read.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

struct DirectRead {
  int64_t message = -1;
  int sender = 0;
  int receiver = 0;
  int send_op = -1;
  int pack_op = -1;    // -1: the Send reads one contiguous source region
  int recv_op = -1;
  int unpack_op = -1;  // -1: the Recv lands in one contiguous destination region
  int64_t bytes = 0;
  std::vector<int> source_buffers;  // the sender's source buffers the copies read, ascending
  // The receiver's staging slots the copies write (ascending; empty for most messages): the
  // receiver holds them from its Recv on, in place of the elided Unpack.
  std::vector<int> to_slots;
  // The message as copies: `from` a region of a sender's source buffer, `to` a region of a
  // receiver's destination buffer or of one of `to_slots`, same shape (dtypes differ where the
  // message converts: the copy converts in one step, as the Pack or Unpack would have). Only on
  // the receiver (empty on the sender), with per copy its geometry and what a run needs of it,
  // compactly (`reads`: the executor walks these every refit, not the 300-byte CopyPairs).
  struct Read {
    int64_t from_offset;  // in the sender's buffer source_buffers[source]
    int64_t to_offset;    // in this rank's destination buffer to_buffer, or slot to_slots[to_slot]
    int64_t from_span;    // bytes the regions span, for bounds checks
    int64_t to_span;
    int source;
    int to_buffer;    // -1 when the copy writes a staging slot
    int to_slot = -1;  // index into to_slots, or -1 when it writes a destination buffer
  };
  std::vector<CopyPair> copies;
  std::vector<CopyGeometry> geometries;
  std::vector<Read> reads;
  // On the receiver, where the read lands in twins of block-scaled matrices: the copies split into
  // pieces and block rectangles it may quantize straight from the sender's memory
  // (quantizing_read.h).
  QuantizingSplit quantizing;
  // The packed read of this message (one entry; none when its Pack does not narrow or it lands in
  // twins): the same message, ops and targets, its copies reading the message's bytes from the
  // sender's staging slot `from_slot` (also its only source buffer) in the message's dtype.
  std::vector<DirectRead> packed;
  int from_slot = -1;  // in a packed read: the sender's slot it reads, which the Pack fills
};

// The messages `rank` sends or receives that may go direct: a Send (not a Forward) over a
// same-node link, fed by nothing or by one Pack that feeds only it, received by a Recv that feeds
// nothing (landing in a destination region), only a Quantize reading the slot part it lands in,
// or only one Unpack from its slot into destination regions or other slots of the receiver, with
// the Pack's and the Unpack's copies meeting at the same staging offsets with the same shapes.
// Ordered by message. Deterministic; O(ops) plus the copies of the messages found. With
// kAnyRank, every rank's, without copies or reads (which ops go direct, for a model of the plan's
// cost); with kEveryReceiver, every rank's with their copies but no geometries or reads (what
// each receiver copies, for a model of the copies' cost). Either way with the quantizing split
// of every read into twins.
inline constexpr int kAnyRank = -1;
inline constexpr int kEveryReceiver = -2;
std::vector<DirectRead> FindDirectReads(const TransferPlan& plan, int rank);

// A cheap checksum of a plan's op structure (kinds, ranks, peers, messages, bytes, dependency
// and copy counts, first and last copy offsets), for caching FindDirectReads across runs of one
// plan. O(ops).
uint64_t PlanFingerprint(const TransferPlan& plan);

// The sender's GPU as its offer names it: the CUDA device UUID of the buffers offered (all zero:
// host memory, or unknown).
using GpuUuid = std::array<uint8_t, 16>;

// The offer a sender puts on the wire: its identity and, per entry of `source_buffers`, where the
// buffer lives, with a digest of those entries. A repeated refit reads the same buffers every
// step, so after the receiver has taken a full offer the sender may send an *abbreviated* one:
// the same header, the same digest, no entries; the receiver then uses the entries it holds for
// that digest (offer_history.h) or asks for the full offer again. The digest is FNV-1a over the
// entries' bytes: it tells honest peers' caches apart, not attackers (the channel is authenticated
// and a full offer is checked in full).
struct OfferHeader {
  ProcessIdentity owner;
  bool abbreviated = false;
  bool packed = false;  // the offer is of the packed read (DirectRead::packed): its one buffer is
                        // the sender's staging slot holding the message
  uint64_t digest = 0;
  GpuUuid gpu{};
};

// Bytes of a full offer of `num_buffers` buffers, and of an abbreviated one.
int64_t DirectReadOfferBytes(size_t num_buffers);
int64_t AbbreviatedOfferBytes();
// The buffers a packed offer of `read` names (0: `read` has no packed read).
size_t PackedOfferBuffers(const DirectRead& read);
// The most bytes an offer of `read` may take, of either kind (the receiver posts this much).
int64_t LargestOfferBytes(const DirectRead& read);
// Writes the full offer (of the packed read when `packed`) into `out`, which must hold
// DirectReadOfferBytes(buffers.size()) bytes; returns its digest. `gpu`: OfferHeader::gpu.
uint64_t EncodeDirectReadOffer(const ProcessIdentity& owner, std::span<const PeerBuffer> buffers,
                               std::span<uint8_t> out, bool packed = false, const GpuUuid& gpu = {});
// Writes an abbreviated offer for `num_buffers` buffers of digest `digest` into `out`, which must
// hold AbbreviatedOfferBytes().
void EncodeAbbreviatedOffer(const ProcessIdentity& owner, size_t num_buffers, uint64_t digest,
                            std::span<uint8_t> out, bool packed = false, const GpuUuid& gpu = {});
// Decodes a full or abbreviated offer (`buffers` is left empty for an abbreviated one): of
// `num_buffers` buffers, or of `packed_buffers` when it is flagged packed (0: a packed offer is
// refused). Fails with kInvalidArgument on a malformed offer, one of another size, one naming a
// different number of buffers, or a full offer whose digest does not match its entries.
Status DecodeDirectReadOffer(std::span<const uint8_t> bytes, size_t num_buffers,
                             OfferHeader& header, std::vector<PeerBuffer>& buffers,
                             size_t packed_buffers = 0);

}  // namespace ferry
