// The rank hello: what a connecting (lower) rank proves to an accepting one before either sends a
// byte of payload, on top of core/runtime/handshake.h. Used by every ferry listener between ranks
// (the tcp transport, libfabric's peer watch), each with its own magic and label, so a hello for
// one cannot be replayed to another.
//
// Hello (64 bytes, little-endian): u32 from_rank, u32 to_rank, u64 epoch, client_nonce[16],
// mac[32] = HMAC-SHA-256(secret, label "-hello" nonce client_nonce from_rank to_rank epoch), where
// `nonce` is the listener's fresh challenge and `client_nonce` the connecting rank's own fresh one.
// The accepting rank answers HMAC-SHA-256(secret, label "-ack" nonce mac), which the connecting
// rank checks, so both ends know the other holds this communicator epoch's secret. Each side's
// proof covers a nonce the other just drew: a hello or an ack recorded off the wire does not
// verify on any later connection (a replay is refused in either direction). Pure functions but
// ProveRank (blocking, by its deadline).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/handshake.h"

namespace ferry {

inline constexpr size_t kRankHelloBytes = 4 + 4 + 8 + 16 + 32;
inline constexpr size_t kRankAckBytes = 32;

struct RankHelloProtocol {
  Magic magic{};
  std::string_view label;  // "tcp", "libfabric-watch"
};

// `nonce`: the listener's challenge; `client_nonce`: drawn fresh by the connecting rank
// (RandomNonce) for this connection only.
Bytes MakeRankHello(const RankHelloProtocol& protocol, const std::string& secret,
                    const Nonce& nonce, const Nonce& client_nonce, int from_rank, int to_rank,
                    uint64_t epoch);

// What an accepting rank expects of a hello.
struct RankHelloExpect {
  const std::string* secret = nullptr;
  int my_rank = 0;
  int size = 1;
  uint64_t epoch = 0;
};
struct RankHelloChecked {
  int from_rank = -1;
  Bytes ack;  // the reply proving we hold the secret
};
// Checks a hello of any length and content: the sender must be a lower rank of this communicator,
// address us, hold our epoch, and carry a valid MAC. The error says which check failed.
Result<RankHelloChecked> CheckRankHello(const RankHelloProtocol& protocol,
                                        const RankHelloExpect& expect, const Nonce& nonce,
                                        std::span<const uint8_t> hello);

// The ack the accepting rank must send for `hello` (the connecting rank compares it).
Bytes RankHelloAck(const RankHelloProtocol& protocol, const std::string& secret, const Nonce& nonce,
                   std::span<const uint8_t> hello);

// The connecting side on socket `fd`: answers the listener's challenge with our hello (with a
// fresh client nonce) and checks its ack. Blocks until done or `deadline`.
Status ProveRank(int fd, const RankHelloProtocol& protocol, const std::string& secret,
                 int from_rank, int to_rank, uint64_t epoch, Deadline deadline);

// Handshake options for an acceptor of rank hellos (what, magic and hello size filled in).
HandshakeOptions RankHelloOptions(const RankHelloProtocol& protocol, std::string what);

}  // namespace ferry
