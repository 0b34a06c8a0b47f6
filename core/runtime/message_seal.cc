// MessageSeal and ReplayWindow (see message_seal.h).
#include "core/runtime/message_seal.h"

#include <cstring>

#include "core/base/hmac.h"

namespace ferry {

bool ReplayWindow::Accept(uint64_t sequence) {
  if (sequence == 0) return false;
  auto bit = [](uint64_t s) { return s % kReplayWindow; };
  if (sequence > highest_) {
    if (sequence - highest_ >= kReplayWindow) {
      std::fill(seen_.begin(), seen_.end(), 0);
    } else {
      for (uint64_t s = highest_ + 1; s < sequence; ++s) seen_[bit(s) / 64] &= ~(uint64_t{1} << (bit(s) % 64));
    }
    highest_ = sequence;
    seen_[bit(sequence) / 64] |= uint64_t{1} << (bit(sequence) % 64);
    return true;
  }
  if (highest_ - sequence >= kReplayWindow) return false;  // too old to tell: refused
  uint64_t& word = seen_[bit(sequence) / 64];
  const uint64_t mask = uint64_t{1} << (bit(sequence) % 64);
  if ((word & mask) != 0) return false;
  word |= mask;
  return true;
}

MessageSeal::MessageSeal(const std::string& secret, std::string_view transport, int rank, int size)
    : next_sequence_(static_cast<size_t>(size), 0), windows_(static_cast<size_t>(size)) {
  for (int r = 0; r < size; ++r) {
    send_keys_.push_back(DerivePairAuthenticator(secret, transport, rank, r));
    recv_keys_.push_back(DerivePairAuthenticator(secret, transport, r, rank));
  }
}

PairAuthenticator MessageSeal::Mac(const PairAuthenticator& key, std::span<const uint8_t> header) const {
  const Digest digest =
      HmacSha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()), header);
  PairAuthenticator mac;
  std::memcpy(mac.data(), digest.data(), mac.size());
  return mac;
}

void MessageSeal::Seal(int peer, std::span<uint8_t> header, uint64_t* sequence, PairAuthenticator* mac) {
  *sequence = ++next_sequence_[static_cast<size_t>(peer)];
  mac->fill(0);
  *mac = Mac(send_keys_[static_cast<size_t>(peer)], header);
}

SealRefusal MessageSeal::Open(int sender, std::span<const uint8_t> header, size_t mac_offset, uint64_t sequence) {
  if (mac_offset + sizeof(PairAuthenticator) > header.size()) return SealRefusal::kWrongMac;
  std::vector<uint8_t> zeroed(header.begin(), header.end());
  PairAuthenticator claimed;
  std::memcpy(claimed.data(), zeroed.data() + mac_offset, claimed.size());
  std::memset(zeroed.data() + mac_offset, 0, claimed.size());
  const PairAuthenticator expected = Mac(recv_keys_[static_cast<size_t>(sender)], zeroed);
  uint8_t diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) diff |= expected[i] ^ claimed[i];
  if (diff != 0) return SealRefusal::kWrongMac;
  return windows_[static_cast<size_t>(sender)].Accept(sequence) ? SealRefusal::kNone : SealRefusal::kReplayed;
}

TagSeal::TagSeal(const std::string& secret, std::string_view transport, int rank, int size) {
  for (int r = 0; r < size; ++r) {
    send_keys_.push_back(DerivePairAuthenticator(secret, transport, rank, r));
    recv_keys_.push_back(DerivePairAuthenticator(secret, transport, r, rank));
  }
}

uint64_t TagSeal::WireTag(const PairAuthenticator& key, uint64_t tag, uint64_t n) {
  uint8_t message[16];
  std::memcpy(message, &tag, 8);
  std::memcpy(message + 8, &n, 8);
  const Digest digest = HmacSha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
                                   std::span<const uint8_t>(message, sizeof(message)));
  uint64_t mask = 0;
  std::memcpy(&mask, digest.data(), sizeof(mask));
  return tag ^ mask;
}

uint64_t TagSeal::Next(const std::vector<PairAuthenticator>& keys,
                       std::map<std::pair<int, uint64_t>, uint64_t>& uses, int peer, uint64_t tag) {
  const uint64_t n = ++uses[{peer, tag}];
  return WireTag(keys[static_cast<size_t>(peer)], tag, n);
}

}  // namespace ferry
