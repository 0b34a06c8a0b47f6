// The sender's side of packed reads (direct_read_protocol.h): which roles a packed message's ops
// take, the offers OfferWriter writes for it (of the staging slot, flagged, abbreviated once taken,
// full again when the arena was reallocated), and how a receiver's request to pack is remembered.
#include "core/runtime/direct_read_protocol.h"

#include <gtest/gtest.h>

#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

// MakePackedPlan narrowing fp32 into bf16: ops 0 Convert (the Pack), 1 Send, 2 Recv, 3 Unpack.
struct PackedSender {
  TransferPlan plan = MakePackedPlan(LinkClass::kSameNode, DType::kBF16);
  std::vector<DirectRead> directs = FindDirectReads(plan, 0);
  std::unordered_map<int, int> local = {{0, 0}, {1, 1}};
  std::vector<float> source = std::vector<float>(32, 1.0f);
  std::vector<char> arena = std::vector<char>(256);
  std::vector<MemoryDesc> sources = {{source.data(), 128, MemoryKind::kHost, -1}};
  CudaExports exports;
  OfferHistory history;
  OfferWriter writer{sources, 0, exports, history};
  MemoryDesc slot{arena.data() + 64, 64, MemoryKind::kHost, -1};
  std::vector<uint8_t> wire = std::vector<uint8_t>(1024);
};

TEST(DirectReadProtocolTest, PackingRunsTheSendersConvert) {
  PackedSender s;
  ASSERT_EQ(s.directs.size(), 1u);
  DirectReadRoles roles = DirectReadRoles::Assign(s.directs, 0, s.local, 2);
  EXPECT_EQ(roles.role[0], DirectRole::kElided);
  EXPECT_EQ(roles.role[1], DirectRole::kOffer);
  EXPECT_EQ(roles.packs, std::vector<char>{0});
  roles.Pack(s.directs, 0, s.local);
  EXPECT_EQ(roles.role[0], DirectRole::kStaged) << "the Convert fills the slot the receiver reads";
  EXPECT_EQ(roles.role[1], DirectRole::kOffer);
  EXPECT_EQ(roles.packs, std::vector<char>{1});
}

TEST(DirectReadProtocolTest, APackedOfferDescribesTheSlot) {
  PackedSender s;
  const DirectRead& d = s.directs[0];
  Result<int64_t> bytes = s.writer.Write(1, 0, d, false, s.wire, &s.slot, 7);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_EQ(*bytes, DirectReadOfferBytes(1));
  OfferHeader header;
  std::vector<PeerBuffer> buffers;
  ASSERT_TRUE(DecodeDirectReadOffer(std::span(s.wire).first(*bytes), 1, header, buffers, 1).ok());
  EXPECT_TRUE(header.packed);
  EXPECT_EQ(header.gpu, GpuUuid{}) << "host memory names no GPU";
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].address, reinterpret_cast<uint64_t>(s.arena.data() + 64));
  EXPECT_EQ(buffers[0].bytes, 64);
  // Taken: abbreviated from now on, unless the arena is a new allocation (even at one address).
  s.writer.Acknowledged(1, 0, /*packed=*/true, /*pack=*/false);
  EXPECT_EQ(*s.writer.Write(1, 0, d, false, s.wire, &s.slot, 7), AbbreviatedOfferBytes());
  ASSERT_TRUE(DecodeDirectReadOffer(std::span(s.wire).first(AbbreviatedOfferBytes()), 1, header, buffers, 1).ok());
  EXPECT_TRUE(header.packed && header.abbreviated);
  EXPECT_EQ(*s.writer.Write(1, 0, d, false, s.wire, &s.slot, 8), DirectReadOfferBytes(1));
  // The wide offer keeps its own history: not taken yet, so full.
  EXPECT_EQ(*s.writer.Write(1, 0, d, false, s.wire), DirectReadOfferBytes(1));
  ASSERT_TRUE(DecodeDirectReadOffer(std::span(s.wire).first(DirectReadOfferBytes(1)), 1, header, buffers, 1).ok());
  EXPECT_FALSE(header.packed);
}

TEST(DirectReadProtocolTest, AReceiversRequestToPackIsRemembered) {
  PackedSender s;
  ASSERT_TRUE(s.writer.Write(3, 0, s.directs[0], false, s.wire).ok());
  EXPECT_FALSE(s.writer.PackRequested(3, 0));
  s.writer.Acknowledged(3, 0, /*packed=*/false, /*pack=*/true);
  EXPECT_TRUE(s.writer.PackRequested(3, 0));
  EXPECT_FALSE(s.writer.PackRequested(4, 0)) << "another plan's message";
}

// The receiver posts room for either offer and accepts only their sizes.
TEST(DirectReadProtocolTest, EitherOffersSizeIsAccepted) {
  PackedSender s;
  const DirectRead& d = s.directs[0];
  EXPECT_TRUE(CheckOfferSize(d, DirectReadOfferBytes(1)).ok());
  EXPECT_TRUE(CheckOfferSize(d, AbbreviatedOfferBytes()).ok());
  EXPECT_EQ(CheckOfferSize(d, DirectReadOfferBytes(2)).code(), StatusCode::kInvalidArgument);
  EXPECT_GE(DirectReadRoles::Assign(s.directs, 0, s.local, 2).control_bytes, LargestOfferBytes(d) + kAnswerBytes);
}

}  // namespace
}  // namespace ferry
