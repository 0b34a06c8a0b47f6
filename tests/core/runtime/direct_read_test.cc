// FindDirectReads on hand-made plans: which same-node messages qualify for a single copy, how
// the Pack and Unpack sides meet and which receiver slots a read writes; the offer's encoding;
// PlanFingerprint.
#include "core/runtime/direct_read.h"
#include "core/runtime/peer_cuda_memory.h"

#include <gtest/gtest.h>

#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

TransferPlan PackedPlan(LinkClass link) { return MakePackedPlan(link); }

// Rank 0 sends a [4, 4] bf16 source block as it is (no Pack); rank 1's Unpack widens it into an
// fp32 destination.
TransferPlan MakeWideningPlan() {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", 32}};
  plan.destination_buffers = {{1, "d", 64}};
  const int slot = plan.AddSlot(1, 32);
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 0, .bytes = 32};
  send.SetData(ByteRange(Space::kSource, 0, 0, 32));
  plan.AddOp(send);
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 0, .bytes = 32};
  recv.SetData(ByteRange(Space::kStaging, slot, 0, 32));
  const int recv_id = plan.AddOp(recv);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = 32};
  plan.AddOp(unpack, {recv_id},
             {{Matrix(DType::kBF16, Space::kStaging, slot, 0, 4, 4, 4), Fp32Matrix(Space::kDestination, 0, 0, 4, 4, 4)}});
  return plan;
}

TEST(DirectReadTest, PackAndUnpackMeetAtTheirStagingOffsets) {
  const TransferPlan plan = PackedPlan(LinkClass::kSameNode);
  for (int rank : {0, 1}) {
    const std::vector<DirectRead> found = FindDirectReads(plan, rank);
    ASSERT_EQ(found.size(), 1u) << "rank " << rank;
    const DirectRead& d = found[0];
    EXPECT_EQ(d.message, 7);
    EXPECT_EQ(d.sender, 0);
    EXPECT_EQ(d.receiver, 1);
    EXPECT_EQ(d.pack_op, 0);
    EXPECT_EQ(d.send_op, 1);
    EXPECT_EQ(d.recv_op, 2);
    EXPECT_EQ(d.unpack_op, 3);
    EXPECT_EQ(d.bytes, 128);
    EXPECT_EQ(d.source_buffers, std::vector<int>{0});
    if (rank == 0) {
      EXPECT_TRUE(d.copies.empty()) << "the sender only offers its buffers";
      continue;
    }
    ASSERT_EQ(d.copies.size(), 2u);
    ASSERT_EQ(d.geometries.size(), 2u);
    EXPECT_EQ(d.geometries[0].rows, 4);
    EXPECT_EQ(d.geometries[0].run, 4);
    ASSERT_EQ(d.reads.size(), 2u);
    EXPECT_EQ(d.reads[0].source, 0);
    EXPECT_EQ(d.reads[0].from_offset, 16);
    EXPECT_EQ(d.reads[0].from_span, (3 * 8 + 4) * 4);
    EXPECT_EQ(d.reads[0].to_buffer, 1);
    EXPECT_EQ(d.reads[0].to_span, 16 * 4);
    // The unpack's first copy (staging offset 64: the right half) lands in buffer 1.
    EXPECT_EQ(d.copies[0].from.offset, 16);
    EXPECT_EQ(d.copies[0].from.strides[0], 8);
    EXPECT_EQ(d.copies[0].to.buffer, 1);
    EXPECT_EQ(d.copies[1].from.offset, 0);
    EXPECT_EQ(d.copies[1].to.buffer, 0);
  }
}

// kAnyRank finds every rank's direct reads at once, without the receiver's copies.
TEST(DirectReadTest, AnyRankFindsEveryMessageWithoutCopies) {
  const std::vector<DirectRead> found = FindDirectReads(PackedPlan(LinkClass::kSameNode), kAnyRank);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pack_op, 0);
  EXPECT_EQ(found[0].unpack_op, 3);
  EXPECT_TRUE(found[0].copies.empty());
  EXPECT_TRUE(found[0].reads.empty());
  EXPECT_TRUE(FindDirectReads(PackedPlan(LinkClass::kNetwork), kAnyRank).empty());
}

// kEveryReceiver finds every rank's direct reads with the copies their receivers make, as the
// receiver's own call does, but without geometries or reads.
TEST(DirectReadTest, EveryReceiverKeepsTheReceiversCopies) {
  const TransferPlan plan = PackedPlan(LinkClass::kSameNode);
  const std::vector<DirectRead> found = FindDirectReads(plan, kEveryReceiver);
  const std::vector<DirectRead> receivers = FindDirectReads(plan, 1);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(found[0].copies.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(found[0].copies[i].from.offset, receivers[0].copies[i].from.offset);
    EXPECT_EQ(found[0].copies[i].from.strides[0], receivers[0].copies[i].from.strides[0]);
    EXPECT_EQ(found[0].copies[i].to.buffer, receivers[0].copies[i].to.buffer);
  }
  EXPECT_TRUE(found[0].geometries.empty());
  EXPECT_TRUE(found[0].reads.empty());
}

TEST(DirectReadTest, NetworkLinksAndOtherRanksAreLeftAlone) {
  EXPECT_TRUE(FindDirectReads(PackedPlan(LinkClass::kNetwork), 0).empty());
  TransferPlan plan = PackedPlan(LinkClass::kSameNode);
  plan.num_ranks = 3;
  EXPECT_TRUE(FindDirectReads(plan, 2).empty());
}

TEST(DirectReadTest, ContiguousSourceAndDestinationSidesAreRebased) {
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", 4096}};
  plan.destination_buffers = {{1, "d", 4096}};
  // Send straight from source bytes [1024, 1152), unpack as a [4, 8] block.
  const int slot = plan.AddSlot(1, 128);
  Op send{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 0,
          .bytes = 128};
  send.SetData(ByteRange(Space::kSource, 0, 1024, 128));
  plan.AddOp(send);
  Op recv{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 0,
          .bytes = 128};
  recv.SetData(ByteRange(Space::kStaging, slot, 0, 128));
  const int recv_id = plan.AddOp(recv);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = 128};
  plan.AddOp(unpack, {recv_id},
             {{Fp32Matrix(Space::kStaging, slot, 0, 4, 8, 8), Fp32Matrix(Space::kDestination, 0, 256, 4, 8, 16)}});
  // And a message received straight into destination bytes, packed from two rows.
  const int send_slot = plan.AddSlot(0, 64);
  Op pack{.kind = OpKind::kPack, .rank = 0, .bytes = 64};
  const int pack_id = plan.AddOp(
      pack, {}, {{Fp32Matrix(Space::kSource, 0, 0, 2, 8, 16), Fp32Matrix(Space::kStaging, send_slot, 0, 2, 8, 8)}});
  Op send2{.kind = OpKind::kSend, .link = LinkClass::kSameNode, .rank = 0, .peer = 1, .message = 1,
           .bytes = 64};
  send2.SetData(ByteRange(Space::kStaging, send_slot, 0, 64));
  plan.AddOp(send2, {pack_id});
  Op recv2{.kind = OpKind::kRecv, .link = LinkClass::kSameNode, .rank = 1, .peer = 0, .message = 1,
           .bytes = 64};
  recv2.SetData(ByteRange(Space::kDestination, 0, 2048, 64));
  plan.AddOp(recv2);

  const std::vector<DirectRead> found = FindDirectReads(plan, 1);
  ASSERT_EQ(found.size(), 2u);
  ASSERT_EQ(found[0].copies.size(), 1u);
  const CopyPair& a = found[0].copies[0];
  EXPECT_EQ(found[0].pack_op, -1);
  EXPECT_EQ(a.from.space, Space::kSource);
  EXPECT_EQ(a.from.offset, 1024);
  EXPECT_EQ(a.from.strides[0], 8);  // dense, as the bytes were sent
  EXPECT_EQ(a.to.offset, 256);
  ASSERT_EQ(found[1].copies.size(), 1u);
  const CopyPair& b = found[1].copies[0];
  EXPECT_EQ(found[1].unpack_op, -1);
  EXPECT_EQ(b.from.strides[0], 16);
  EXPECT_EQ(b.to.space, Space::kDestination);
  EXPECT_EQ(b.to.offset, 2048);
  EXPECT_EQ(b.to.strides[0], 8);
}

// An Unpack that fills a slot of its rank besides the one it reads (the bf16 twin a Quantize op
// turns into block-scaled fp8) goes direct: the receiver's copy writes that slot, which it holds
// from its Recv on (to_slots). A slot of another rank, or the received slot itself, keeps the
// staged path.
TEST(DirectReadTest, UnpackIntoAnotherSlotOfTheReceiverGoesDirect) {
  TransferPlan plan = PackedPlan(LinkClass::kSameNode);
  const int twin = plan.AddSlot(1, 64);
  std::vector<CopyPair> pairs(plan.Copies(plan.ops[3]).begin(), plan.Copies(plan.ops[3]).end());
  pairs[0].to = Fp32Matrix(Space::kStaging, twin, 0, 4, 4, 4);
  plan.SetCopies(3, pairs);
  const std::vector<DirectRead> found = FindDirectReads(plan, 1);
  ASSERT_EQ(found.size(), 1u);
  const DirectRead& d = found[0];
  EXPECT_EQ(d.to_slots, std::vector<int>{twin});
  ASSERT_EQ(d.reads.size(), 2u);
  EXPECT_EQ(d.reads[0].to_slot, 0);
  EXPECT_EQ(d.reads[0].to_buffer, -1);
  EXPECT_EQ(d.reads[0].to_offset, 0);
  EXPECT_EQ(d.reads[0].from_offset, 16) << "the right half of the source, as the Unpack's first pair";
  EXPECT_EQ(d.reads[1].to_slot, -1);
  EXPECT_EQ(d.reads[1].to_buffer, 0);
  EXPECT_EQ(d.copies[0].to.space, Space::kStaging);

  TransferPlan elsewhere = plan;
  const int foreign = elsewhere.AddSlot(0, 64);
  pairs[0].to = Fp32Matrix(Space::kStaging, foreign, 0, 4, 4, 4);
  elsewhere.SetCopies(3, pairs);
  EXPECT_TRUE(FindDirectReads(elsewhere, 1).empty()) << "a slot of the sender's rank";
  pairs[0].to = Fp32Matrix(Space::kStaging, 1, 0, 4, 4, 4);  // the received slot
  elsewhere.SetCopies(3, pairs);
  EXPECT_TRUE(FindDirectReads(elsewhere, 1).empty()) << "the slot the message lands in";
}

// A Recv that lands in part of a bf16 twin, which a Quantize op reads whole once every part
// arrived, goes direct too: the copy writes the twin where the Recv would have.
TEST(DirectReadTest, RecvIntoAQuantizedTwinGoesDirect) {
  const TransferPlan plan = MakeTwinReadPlan(8, 16, 128, 128, 3);
  const int twin = 0, recv_id = 1;
  const std::vector<DirectRead> found = FindDirectReads(plan, 1);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].unpack_op, -1);
  EXPECT_EQ(found[0].to_slots, std::vector<int>{twin});
  ASSERT_EQ(found[0].reads.size(), 1u);
  EXPECT_EQ(found[0].reads[0].to_slot, 0);
  EXPECT_EQ(found[0].reads[0].to_offset, 128);
  EXPECT_EQ(found[0].reads[0].from_offset, 128);

  // A Forward reading the slot as well: the message stays staged.
  TransferPlan relayed = plan;
  relayed.num_ranks = 3;
  Op forward{.kind = OpKind::kForward, .link = LinkClass::kSameNode, .rank = 1, .peer = 2, .message = 4,
             .bytes = 128};
  forward.data = plan.ops[recv_id].data;
  relayed.AddOp(forward, {recv_id});
  EXPECT_TRUE(FindDirectReads(relayed, 1).empty());
}

TEST(DirectReadTest, RelayedAndMismatchedMessagesKeepTheStagedPath) {
  // A Forward reads the received slot: the message must land in staging.
  TransferPlan relayed = PackedPlan(LinkClass::kSameNode);
  relayed.num_ranks = 3;
  Op forward{.kind = OpKind::kForward, .link = LinkClass::kSameNode, .rank = 1, .peer = 2,
             .message = 8, .bytes = 128};
  forward.data = relayed.ops[2].data;
  relayed.AddOp(forward, {2});
  EXPECT_TRUE(FindDirectReads(relayed, 1).empty());

  // Pack and Unpack that do not meet at the same offsets.
  TransferPlan shifted = PackedPlan(LinkClass::kSameNode);
  std::vector<CopyPair> pairs(shifted.Copies(shifted.ops[3]).begin(), shifted.Copies(shifted.ops[3]).end());
  pairs[0].from.offset = 32;
  shifted.SetCopies(3, pairs);
  EXPECT_TRUE(FindDirectReads(shifted, 0).empty());
  EXPECT_TRUE(FindDirectReads(shifted, 1).empty());
}

TEST(DirectReadTest, OfferRoundTripsAndRejectsTheWrongSize) {
  ProcessIdentity owner{1234, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  std::vector<PeerBuffer> buffers = {{0x7f0000001000, 4096, 5, 256, 99}, {0x7f0000100000, 64, -1, 0, 0}};
  std::vector<uint8_t> wire(static_cast<size_t>(DirectReadOfferBytes(2)), 0xee);
  EncodeDirectReadOffer(owner, buffers, wire);
  OfferHeader got;
  std::vector<PeerBuffer> got_buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(wire, 2, got, got_buffers).ok());
  EXPECT_EQ(got.owner.pid, 1234);
  EXPECT_EQ(got.owner.boot_id, owner.boot_id);
  EXPECT_FALSE(got.abbreviated);
  ASSERT_EQ(got_buffers.size(), 2u);
  EXPECT_EQ(got_buffers[0].address, 0x7f0000001000u);
  EXPECT_EQ(got_buffers[0].shared_fd, 5);
  EXPECT_EQ(got_buffers[0].shared_offset, 256);
  EXPECT_EQ(got_buffers[0].inode, 99u);
  EXPECT_EQ(got_buffers[1].shared_fd, -1);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 1, got, got_buffers).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> garbage(wire.size(), 0);
  EXPECT_EQ(DecodeDirectReadOffer(garbage, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
}

// Version 2 of the offer: a CUDA buffer carries its kind, device, allocation size and IPC handle;
// a buffer outside its allocation, an unknown kind or a version-1 offer are rejected.
TEST(DirectReadTest, OfferCarriesCudaIpcHandlesAndChecksTheirBounds) {
  ProcessIdentity owner{77, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  PeerBuffer cuda_buffer;
  cuda_buffer.address = 0x7e0000200000;
  cuda_buffer.bytes = 1 << 20;
  cuda_buffer.kind = MemoryKind::kCuda;
  cuda_buffer.device = 3;
  cuda_buffer.shared_offset = 4096;
  cuda_buffer.allocation_bytes = (1 << 20) + 4096;
  for (size_t i = 0; i < cuda_buffer.ipc_handle.size(); ++i) cuda_buffer.ipc_handle[i] = static_cast<uint8_t>(i * 3);
  std::vector<PeerBuffer> buffers = {{0x7f0000001000, 4096, 5, 256, 99}, cuda_buffer};
  std::vector<uint8_t> wire(static_cast<size_t>(DirectReadOfferBytes(2)));
  EncodeDirectReadOffer(owner, buffers, wire);
  OfferHeader got;
  std::vector<PeerBuffer> got_buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(wire, 2, got, got_buffers).ok());
  EXPECT_EQ(got_buffers[0].kind, MemoryKind::kHost);
  EXPECT_EQ(got_buffers[1].kind, MemoryKind::kCuda);
  EXPECT_EQ(got_buffers[1].device, 3);
  EXPECT_EQ(got_buffers[1].shared_offset, 4096);
  EXPECT_EQ(got_buffers[1].allocation_bytes, (1 << 20) + 4096);
  EXPECT_EQ(got_buffers[1].ipc_handle, cuda_buffer.ipc_handle);

  buffers[1].allocation_bytes = 1 << 20;  // the buffer now ends past its allocation
  EncodeDirectReadOffer(owner, buffers, wire);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);

  buffers[1].allocation_bytes = (1 << 20) + 4096;
  buffers[0].kind = static_cast<MemoryKind>(9);
  EncodeDirectReadOffer(owner, buffers, wire);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
  buffers[0].kind = MemoryKind::kHost;
  EncodeDirectReadOffer(owner, buffers, wire);
  std::vector<uint8_t> version_two = wire;
  version_two[4] = 2;
  EXPECT_EQ(DecodeDirectReadOffer(version_two, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
}

// A VMM buffer travels as a CUDA buffer with the VMM flag, its span in allocation_bytes and
// shared_offset and ferry's export record in the handle field; the flag on a host buffer is
// refused.
TEST(DirectReadTest, OfferCarriesVmmExportsAndRefusesStrayFlags) {
  ProcessIdentity owner{77, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  PeerBuffer vmm;
  vmm.address = 0x7e0001400000 + 4096;
  vmm.bytes = 30 << 20;
  vmm.kind = MemoryKind::kCuda;
  vmm.device = 0;
  vmm.cuda_vmm = true;
  vmm.shared_offset = 4096;
  vmm.allocation_bytes = 40 << 20;  // two 20 MiB mappings
  PutVmmRecord({42, 0x5555deadbe00, 2}, vmm.ipc_handle);
  std::vector<PeerBuffer> buffers = {vmm};
  std::vector<uint8_t> wire(static_cast<size_t>(DirectReadOfferBytes(1)));
  EncodeDirectReadOffer(owner, buffers, wire);
  OfferHeader got;
  std::vector<PeerBuffer> got_buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(wire, 1, got, got_buffers).ok());
  EXPECT_TRUE(got_buffers[0].cuda_vmm);
  const VmmRecord record = GetVmmRecord(got_buffers[0].ipc_handle);
  EXPECT_EQ(record.export_id, 42u);
  EXPECT_EQ(record.table, 0x5555deadbe00u);
  EXPECT_EQ(record.chunks, 2);
  EXPECT_EQ(got_buffers[0].allocation_bytes, 40 << 20);

  buffers[0].kind = MemoryKind::kHost;  // a VMM flag on a host buffer
  EncodeDirectReadOffer(owner, buffers, wire);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 1, got, got_buffers).code(), StatusCode::kInvalidArgument);
}

// An abbreviated offer is the header alone, with the digest of the full offer's entries; a full
// offer whose entries do not match its digest, or a flag that does not match the size, is refused.
TEST(DirectReadTest, AbbreviatedOfferCarriesTheFullOffersDigest) {
  ProcessIdentity owner{4321, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  std::vector<PeerBuffer> buffers = {{0x7f0000001000, 4096, 5, 256, 99}, {0x7f0000100000, 64, -1, 0, 0}};
  std::vector<uint8_t> full(static_cast<size_t>(DirectReadOfferBytes(2)));
  const uint64_t digest = EncodeDirectReadOffer(owner, buffers, full);
  std::vector<uint8_t> moved(full.size());
  buffers[1].address += 64;
  EXPECT_NE(EncodeDirectReadOffer(owner, buffers, moved), digest);

  std::vector<uint8_t> abbreviated(static_cast<size_t>(AbbreviatedOfferBytes()));
  ASSERT_LT(abbreviated.size(), full.size());
  EncodeAbbreviatedOffer(owner, 2, digest, abbreviated);
  OfferHeader got;
  std::vector<PeerBuffer> got_buffers = buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(abbreviated, 2, got, got_buffers).ok());
  EXPECT_TRUE(got.abbreviated);
  EXPECT_EQ(got.digest, digest);
  EXPECT_EQ(got.owner.pid, 4321);
  EXPECT_TRUE(got_buffers.empty());
  EXPECT_EQ(DecodeDirectReadOffer(abbreviated, 3, got, got_buffers).code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(DecodeDirectReadOffer(full, 2, got, got_buffers).ok());
  EXPECT_FALSE(got.abbreviated);
  EXPECT_EQ(got.digest, digest);
  std::vector<uint8_t> tampered = full;
  tampered.back() ^= 1;  // an IPC handle byte: the digest no longer matches
  EXPECT_EQ(DecodeDirectReadOffer(tampered, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> flagged = full;
  const size_t flags_at = 4 + 4 + 8 + 40 + 4;
  flagged[flags_at] = 1;  // "abbreviated", in a full offer's size
  EXPECT_EQ(DecodeDirectReadOffer(flagged, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
  abbreviated[flags_at] = 0;  // "full", in an abbreviated offer's size
  EXPECT_EQ(DecodeDirectReadOffer(abbreviated, 2, got, got_buffers).code(), StatusCode::kInvalidArgument);
}

// A Pack that narrows (fp32 into bf16 in staging) gives the message a packed read: the sender's
// slot 0 at the Pack's offsets, in bf16, to the Unpack's destinations, without converting. The
// right half of the source (columns 4..7, source offset 16) is packed at slot offset 16 * 2 = 32
// and unpacked into destination buffer 1; the left half at offset 0 into buffer 0.
TEST(DirectReadTest, ANarrowingPackGivesTheMessageAPackedRead) {
  const TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  const std::vector<DirectRead> found = FindDirectReads(plan, 1);
  ASSERT_EQ(found.size(), 1u);
  const DirectRead& d = found[0];
  EXPECT_EQ(d.copies[0].from.dtype, DType::kFP32) << "the read itself converts";
  ASSERT_EQ(d.packed.size(), 1u);
  const DirectRead& p = d.packed[0];
  EXPECT_EQ(p.from_slot, 0);
  EXPECT_EQ(p.source_buffers, std::vector<int>{0});
  EXPECT_EQ(p.pack_op, d.pack_op);
  EXPECT_EQ(p.unpack_op, d.unpack_op);
  EXPECT_TRUE(p.to_slots.empty());
  ASSERT_EQ(p.copies.size(), 2u);
  ASSERT_EQ(p.reads.size(), 2u);
  EXPECT_EQ(p.copies[0].from.space, Space::kStaging);
  EXPECT_EQ(p.copies[0].from.dtype, DType::kBF16);
  EXPECT_EQ(p.copies[0].from.offset, 32);
  EXPECT_EQ(p.copies[0].from.strides[0], 4);  // dense, as packed
  EXPECT_EQ(p.copies[0].to.buffer, 1);
  EXPECT_EQ(p.copies[0].to.dtype, DType::kBF16);
  EXPECT_EQ(p.copies[1].from.offset, 0);
  EXPECT_EQ(p.copies[1].to.buffer, 0);
  EXPECT_EQ(p.reads[0].source, 0);
  EXPECT_EQ(p.reads[0].from_offset, 32);
  EXPECT_EQ(p.reads[0].from_span, 16 * 2);
  EXPECT_EQ(p.geometries[0].bytes(), 16 * 2);
  EXPECT_EQ(LargestOfferBytes(d), DirectReadOfferBytes(1));
  // The sender knows the packed read too (to offer its slot), without the receiver's copies.
  const std::vector<DirectRead> sender = FindDirectReads(plan, 0);
  ASSERT_EQ(sender[0].packed.size(), 1u);
  EXPECT_TRUE(sender[0].packed[0].copies.empty());
}

// Messages whose Pack keeps the dtype, or whose Unpack widens, have no packed read: their read
// moves no more bytes than the message.
TEST(DirectReadTest, MessagesThatDoNotNarrowHaveNoPackedRead) {
  for (const TransferPlan& plan : {MakePackedPlan(LinkClass::kSameNode), MakeWideningPlan()}) {
    const std::vector<DirectRead> found = FindDirectReads(plan, 1);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_TRUE(found[0].packed.empty());
  }
}

// The packed offer: one entry (the slot), flagged; accepted only where the message has a packed
// read of that many buffers. The sender's GPU travels in the header of both kinds.
TEST(DirectReadTest, PackedOfferIsFlaggedAndNamesTheSendersGpu) {
  ProcessIdentity owner{99, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  GpuUuid gpu{};
  for (size_t i = 0; i < gpu.size(); ++i) gpu[i] = static_cast<uint8_t>(0xa0 + i);
  const PeerBuffer slot{0x7f0000200000, 64, -1, 0, 0};
  std::vector<uint8_t> wire(static_cast<size_t>(DirectReadOfferBytes(1)));
  EncodeDirectReadOffer(owner, std::span<const PeerBuffer>(&slot, 1), wire, /*packed=*/true, gpu);
  OfferHeader got;
  std::vector<PeerBuffer> buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(wire, 3, got, buffers, /*packed_buffers=*/1).ok());
  EXPECT_TRUE(got.packed);
  EXPECT_EQ(got.gpu, gpu);
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].address, 0x7f0000200000u);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 3, got, buffers).code(), StatusCode::kInvalidArgument)
      << "a packed offer for a message without a packed read";
  EXPECT_EQ(DecodeDirectReadOffer(wire, 1, got, buffers, 2).code(), StatusCode::kInvalidArgument)
      << "a packed offer of the wrong number of buffers";
  std::vector<uint8_t> abbreviated(static_cast<size_t>(AbbreviatedOfferBytes()));
  EncodeAbbreviatedOffer(owner, 1, 5, abbreviated, /*packed=*/true, gpu);
  ASSERT_TRUE(DecodeDirectReadOffer(abbreviated, 3, got, buffers, 1).ok());
  EXPECT_TRUE(got.packed && got.abbreviated);
  EXPECT_EQ(got.gpu, gpu);
}

// A forged offer's sizes and offsets cannot wrap into range: negative ones are refused on decode.
TEST(DirectReadTest, OfferWithNegativeSizesOrBadPidIsRefused) {
  ProcessIdentity owner{1234, "0b1e3c5a-5b7e-4a1c-9d7e-123456789abc"};
  std::vector<uint8_t> wire(static_cast<size_t>(DirectReadOfferBytes(1)), 0);
  OfferHeader got;
  std::vector<PeerBuffer> got_buffers;
  for (PeerBuffer forged : {PeerBuffer{0x1000, -5, 5, 0, 1}, PeerBuffer{0x1000, 64, 5, -1, 1},
                            PeerBuffer{0x1000, 64, -7, 0, 1}}) {
    EncodeDirectReadOffer(owner, {&forged, 1}, wire);
    EXPECT_EQ(DecodeDirectReadOffer(wire, 1, got, got_buffers).code(), StatusCode::kInvalidArgument);
  }
  PeerBuffer fine{0x1000, 64, 5, 0, 1};
  EncodeDirectReadOffer(ProcessIdentity{-1, owner.boot_id}, {&fine, 1}, wire);
  EXPECT_EQ(DecodeDirectReadOffer(wire, 1, got, got_buffers).code(), StatusCode::kInvalidArgument);
  EncodeDirectReadOffer(owner, {&fine, 1}, wire);
  EXPECT_TRUE(DecodeDirectReadOffer(wire, 1, got, got_buffers).ok());
}

TEST(DirectReadTest, FingerprintFollowsTheOps) {
  const TransferPlan plan = PackedPlan(LinkClass::kSameNode);
  TransferPlan changed = plan;
  EXPECT_EQ(PlanFingerprint(plan), PlanFingerprint(changed));
  changed.ops[1].bytes = 64;
  EXPECT_NE(PlanFingerprint(plan), PlanFingerprint(changed));
}

// VMM buffers share an export where their mapped ranges overlap or touch: two buffers sharing a
// mapping, and a third starting where the second's last mapping ends, are one span; a range past
// a gap is another.
TEST(DirectReadTest, VmmRangesJoinWhereTheyOverlapOrTouch) {
  const std::vector<AddressRange> joined =
      JoinTouchingRanges({{0x600000, 0x800000}, {0x200000, 0x600000}, {0x400000, 0x600000}, {0xa00000, 0xc00000}});
  EXPECT_EQ(joined, (std::vector<AddressRange>{{0x200000, 0x800000}, {0xa00000, 0xc00000}}));
  EXPECT_TRUE(JoinTouchingRanges({}).empty());
  EXPECT_EQ(JoinTouchingRanges({{0x200000, 0x800000}, {0x400000, 0x600000}}),
            (std::vector<AddressRange>{{0x200000, 0x800000}}));
}

}  // namespace
}  // namespace ferry
