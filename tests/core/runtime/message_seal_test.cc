// MessageSeal and ReplayWindow: a sealed header opens once at its receiver; the same bytes sent
// again (a replay of a message copied off the wire), a header with a changed field, one sealed
// for another receiver or with another epoch's secret do not; sequence numbers may arrive out of
// order within the window, not below it. TagSeal: the n-th receive of a tag matches only the
// n-th send of it, so the wire tag of a recorded message matches no later receive.
#include "core/runtime/message_seal.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <span>

namespace ferry {
namespace {

// A header shaped like a transport's: some fields, a sequence number, the MAC last.
struct Header {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t sequence = 0;
  PairAuthenticator mac{};
};

Header Sealed(MessageSeal& seal, int peer, uint64_t tag) {
  Header h;
  h.tag = tag;
  h.bytes = 4096;
  seal.Seal(peer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&h), sizeof(h)), &h.sequence, &h.mac);
  return h;
}

SealRefusal Open(MessageSeal& seal, int sender, const Header& h) {
  return seal.Open(sender, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&h), sizeof(h)),
                   offsetof(Header, mac), h.sequence);
}

TEST(MessageSealTest, ASealedHeaderOpensOnceAndItsReplayIsRefused) {
  MessageSeal rank0("epoch-1-secret", "ucx", 0, 3), rank1("epoch-1-secret", "ucx", 1, 3);
  const Header first = Sealed(rank0, 1, 77), second = Sealed(rank0, 1, 77);
  EXPECT_EQ(first.sequence, 1u);
  EXPECT_EQ(second.sequence, 2u);
  EXPECT_EQ(Open(rank1, 0, first), SealRefusal::kNone);
  EXPECT_EQ(Open(rank1, 0, first), SealRefusal::kReplayed);  // the same bytes again
  EXPECT_EQ(Open(rank1, 0, second), SealRefusal::kNone);
  EXPECT_EQ(Open(rank1, 0, second), SealRefusal::kReplayed);
}

TEST(MessageSealTest, AlteredForeignOrStaleHeadersAreRefused) {
  MessageSeal rank0("epoch-1-secret", "ucx", 0, 3), rank1("epoch-1-secret", "ucx", 1, 3);
  MessageSeal rank2("epoch-1-secret", "ucx", 2, 3), stale("epoch-0-secret", "ucx", 0, 3);
  MessageSeal libfabric0("epoch-1-secret", "libfabric", 0, 3);
  Header altered = Sealed(rank0, 1, 77);
  altered.tag = 78;
  EXPECT_EQ(Open(rank1, 0, altered), SealRefusal::kWrongMac);
  Header renumbered = Sealed(rank0, 1, 77);
  renumbered.sequence += 100;  // a replay dressed up with a fresh number
  EXPECT_EQ(Open(rank1, 0, renumbered), SealRefusal::kWrongMac);
  EXPECT_EQ(Open(rank2, 0, Sealed(rank0, 1, 77)), SealRefusal::kWrongMac);  // sealed for rank 1
  EXPECT_EQ(Open(rank1, 2, Sealed(rank0, 1, 77)), SealRefusal::kWrongMac);  // not from rank 2
  EXPECT_EQ(Open(rank1, 0, Sealed(stale, 1, 77)), SealRefusal::kWrongMac);  // another epoch
  EXPECT_EQ(Open(rank1, 0, Sealed(libfabric0, 1, 77)), SealRefusal::kWrongMac);  // another transport
}

TEST(ReplayWindowTest, EachNumberOnceOutOfOrderWithinTheWindowNothingBelowIt) {
  ReplayWindow w;
  EXPECT_FALSE(w.Accept(0));
  EXPECT_TRUE(w.Accept(3));
  EXPECT_TRUE(w.Accept(1));
  EXPECT_TRUE(w.Accept(2));
  EXPECT_FALSE(w.Accept(2));
  EXPECT_TRUE(w.Accept(5000));
  EXPECT_TRUE(w.Accept(5000 - ReplayWindow::kReplayWindow + 1));   // the oldest still tracked
  EXPECT_FALSE(w.Accept(5000 - ReplayWindow::kReplayWindow + 1));
  EXPECT_FALSE(w.Accept(5000 - ReplayWindow::kReplayWindow));      // below the window: refused
  EXPECT_FALSE(w.Accept(3));
  EXPECT_TRUE(w.Accept(4999));
  // A jump of more than the window forgets what it held, but never what lies above it.
  EXPECT_TRUE(w.Accept(5000 + 3 * ReplayWindow::kReplayWindow));
  EXPECT_FALSE(w.Accept(5000 + 3 * ReplayWindow::kReplayWindow));
  EXPECT_TRUE(w.Accept(5000 + 3 * ReplayWindow::kReplayWindow - 1));
  EXPECT_FALSE(w.Accept(5000));
}

TEST(TagSealTest, TheNthReceiveMatchesOnlyTheNthSendSoARecordedTagMatchesNothingLater) {
  TagSeal rank0("epoch-1-secret", "libfabric", 0, 2), rank1("epoch-1-secret", "libfabric", 1, 2);
  const uint64_t tag = (uint64_t{1} << 48) | 42;
  const uint64_t first_send = rank0.NextSend(1, tag);
  const uint64_t first_receive = rank1.NextReceive(0, tag);
  EXPECT_EQ(first_send, first_receive);
  EXPECT_NE(first_send, tag);  // keyed: a stranger cannot guess it
  const uint64_t second_receive = rank1.NextReceive(0, tag);
  EXPECT_NE(second_receive, first_send);  // the first message, replayed, does not match the second
  EXPECT_EQ(rank0.NextSend(1, tag), second_receive);
  // Keyed per direction and per tag; another epoch's secret gives other tags.
  EXPECT_NE(rank1.NextSend(0, tag), TagSeal("epoch-1-secret", "libfabric", 1, 2).NextReceive(0, tag));
  EXPECT_NE(rank0.NextSend(1, tag + 1), TagSeal("epoch-1-secret", "libfabric", 1, 2).NextReceive(0, tag));
  EXPECT_NE(TagSeal("epoch-2-secret", "libfabric", 0, 2).NextSend(1, tag), first_send);
}

}  // namespace
}  // namespace ferry
