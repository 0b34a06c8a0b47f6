// MessageSeal: per-message authenticators for a transport whose messages carry a header the
// library writes (ucx active messages), so that a message copied off the wire and injected again
// is refused, not only one from a process without the secret.
//
// Each direction of each pair of ranks has a key (DerivePairAuthenticator(secret, transport,
// from, to), handshake.h) and a sequence number, from 1. The sender puts the next sequence number
// into the header and a 16-byte MAC over the whole header (the MAC field zeroed) keyed by the
// pair's key; the receiver recomputes the MAC with the key it derives for the claimed sender,
// then accepts each sequence number at most once: a window of the last kReplayWindow numbers
// below the highest accepted remembers which arrived (messages may arrive out of order within
// it), and anything older is refused. A recorded message thus opens nothing twice, and a forged or
// altered header opens nothing at all; a message of another epoch or job fails its MAC (its
// secret differs).
//
// TagSeal does the same for a transport whose only field the library controls is the 64-bit
// tag the provider matches on (libfabric): the n-th message with plan tag T from one rank to
// another (n from 1) goes with wire tag T XOR the first 8 bytes of HMAC(pair key, T, n). Both
// sides count the uses of T per peer and direction — sends at the sender, receives in the order
// they are posted at the receiver — so a receive matches only the message sent for it: a copy of
// an earlier message carries an earlier n and matches nothing (the provider holds it as
// unexpected until the endpoint closes), and without the secret no tag matches at all. A
// cancelled receive has used its number: later messages of that tag from that peer then match
// nothing, so cancel only what will not be received again in this epoch.
//
// Not thread-safe: one instance per transport, driven by its progress thread.
#pragma once

#include <map>
#include <utility>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/handshake.h"

namespace ferry {

// The sequence numbers a receiver accepts from one sender: each at most once, none more than
// kReplayWindow below the highest accepted.
class ReplayWindow {
 public:
  static constexpr uint64_t kReplayWindow = 4096;
  ReplayWindow() : seen_(kReplayWindow / 64, 0) {}
  // True the first time `sequence` (>= 1) is offered within the window; records it.
  bool Accept(uint64_t sequence);

 private:
  uint64_t highest_ = 0;
  std::vector<uint64_t> seen_;  // bit (s % kReplayWindow) for s in (highest_ - window, highest_]
};

// Why MessageSeal::Open refused a header.
enum class SealRefusal { kNone, kWrongMac, kReplayed };

class MessageSeal {
 public:
  // This rank's keys for `size` ranks of one transport instance, from the epoch's `secret`.
  MessageSeal(const std::string& secret, std::string_view transport, int rank, int size);

  // Seals a header for `peer`: writes the next sequence number through `sequence` (which must
  // point into `header`), then the MAC of `header` into `mac` (also inside it, zeroed first).
  void Seal(int peer, std::span<uint8_t> header, uint64_t* sequence, PairAuthenticator* mac);
  // Checks a header claiming to come from `sender` (in range): its MAC, then its sequence number.
  // `header` is copied with the MAC field (at `mac_offset`) zeroed to recompute it.
  SealRefusal Open(int sender, std::span<const uint8_t> header, size_t mac_offset, uint64_t sequence);

 private:
  PairAuthenticator Mac(const PairAuthenticator& key, std::span<const uint8_t> header) const;

  std::vector<PairAuthenticator> send_keys_;  // per receiver
  std::vector<PairAuthenticator> recv_keys_;  // per sender
  std::vector<uint64_t> next_sequence_;       // per receiver: the last one sent
  std::vector<ReplayWindow> windows_;         // per sender
};

class TagSeal {
 public:
  // This rank's keys for `size` ranks of one transport instance, from the epoch's `secret`.
  TagSeal(const std::string& secret, std::string_view transport, int rank, int size);
  // The wire tag of the next send of `tag` to `peer` / the next receive of `tag` posted for `peer`.
  uint64_t NextSend(int peer, uint64_t tag) { return Next(send_keys_, sends_, peer, tag); }
  uint64_t NextReceive(int peer, uint64_t tag) { return Next(recv_keys_, receives_, peer, tag); }
  // The wire tag of use `n` (from 1) of `tag` under `key`.
  static uint64_t WireTag(const PairAuthenticator& key, uint64_t tag, uint64_t n);

 private:
  uint64_t Next(const std::vector<PairAuthenticator>& keys, std::map<std::pair<int, uint64_t>, uint64_t>& uses,
                int peer, uint64_t tag);

  std::vector<PairAuthenticator> send_keys_;  // per receiver
  std::vector<PairAuthenticator> recv_keys_;  // per sender
  std::map<std::pair<int, uint64_t>, uint64_t> sends_, receives_;  // (peer, tag) -> uses so far
};

}  // namespace ferry
