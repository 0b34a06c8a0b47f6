// The rank hello: building, checking, acknowledging and proving it.
#include "core/runtime/rank_hello.h"

#include <cstring>

#include "core/base/hmac.h"

namespace ferry {

namespace {

constexpr size_t kClientNonceAt = 16;
constexpr size_t kMacAt = kClientNonceAt + 16;

Digest HelloMac(const RankHelloProtocol& protocol, const std::string& secret, const Nonce& nonce,
                const Nonce& client_nonce, uint32_t from, uint32_t to, uint64_t epoch) {
  Bytes message(protocol.label.begin(), protocol.label.end());
  std::string suffix = "-hello";
  message.insert(message.end(), suffix.begin(), suffix.end());
  message.insert(message.end(), nonce.begin(), nonce.end());
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  AppendRaw(message, from);
  AppendRaw(message, to);
  AppendRaw(message, epoch);
  return HmacSha256(secret, message);
}

}  // namespace

Bytes MakeRankHello(const RankHelloProtocol& protocol, const std::string& secret,
                    const Nonce& nonce, const Nonce& client_nonce, int from_rank, int to_rank,
                    uint64_t epoch) {
  Bytes hello;
  AppendRaw(hello, static_cast<uint32_t>(from_rank));
  AppendRaw(hello, static_cast<uint32_t>(to_rank));
  AppendRaw(hello, epoch);
  hello.insert(hello.end(), client_nonce.begin(), client_nonce.end());
  Digest mac = HelloMac(protocol, secret, nonce, client_nonce, static_cast<uint32_t>(from_rank),
                        static_cast<uint32_t>(to_rank), epoch);
  hello.insert(hello.end(), mac.begin(), mac.end());
  return hello;
}

Bytes RankHelloAck(const RankHelloProtocol& protocol, const std::string& secret, const Nonce& nonce,
                   std::span<const uint8_t> hello) {
  Bytes message(protocol.label.begin(), protocol.label.end());
  std::string suffix = "-ack";
  message.insert(message.end(), suffix.begin(), suffix.end());
  message.insert(message.end(), nonce.begin(), nonce.end());
  if (hello.size() == kRankHelloBytes) message.insert(message.end(), hello.end() - 32, hello.end());
  Digest ack = HmacSha256(secret, message);
  return Bytes(ack.begin(), ack.end());
}

Result<RankHelloChecked> CheckRankHello(const RankHelloProtocol& protocol,
                                        const RankHelloExpect& expect, const Nonce& nonce,
                                        std::span<const uint8_t> hello) {
  if (hello.size() != kRankHelloBytes) {
    return InvalidArgument("hello of " + std::to_string(hello.size()) + " bytes, expected " +
                           std::to_string(kRankHelloBytes));
  }
  uint32_t from = 0, to = 0;
  uint64_t epoch = 0;
  std::memcpy(&from, hello.data(), 4);
  std::memcpy(&to, hello.data() + 4, 4);
  std::memcpy(&epoch, hello.data() + 8, 8);
  Nonce client_nonce{};
  std::memcpy(client_nonce.data(), hello.data() + kClientNonceAt, client_nonce.size());
  Digest mac{};
  std::memcpy(mac.data(), hello.data() + kMacAt, mac.size());
  // The MAC first: a stranger learns nothing about which of the fields below it got wrong.
  if (expect.secret == nullptr ||
      !DigestEqual(mac, HelloMac(protocol, *expect.secret, nonce, client_nonce, from, to, epoch))) {
    return InvalidArgument("authentication failed (not a rank of this communicator epoch)");
  }
  if (epoch != expect.epoch) {
    return InvalidArgument("hello of epoch " + std::to_string(epoch) + ", this is epoch " +
                           std::to_string(expect.epoch));
  }
  if (to != static_cast<uint32_t>(expect.my_rank)) {
    return InvalidArgument("hello addressed to rank " + std::to_string(to));
  }
  if (from >= static_cast<uint32_t>(expect.my_rank) || from >= static_cast<uint32_t>(expect.size)) {
    return InvalidArgument("hello from rank " + std::to_string(from) +
                           ", which does not connect to rank " + std::to_string(expect.my_rank));
  }
  RankHelloChecked out;
  out.from_rank = static_cast<int>(from);
  out.ack = RankHelloAck(protocol, *expect.secret, nonce, hello);
  return out;
}

Status ProveRank(int fd, const RankHelloProtocol& protocol, const std::string& secret,
                 int from_rank, int to_rank, uint64_t epoch, Deadline deadline) {
  Bytes sent;
  const Nonce client_nonce = RandomNonce();
  auto reply = ClientHandshake(
      fd, protocol.magic,
      [&](const Nonce& nonce) {
        sent = MakeRankHello(protocol, secret, nonce, client_nonce, from_rank, to_rank, epoch);
        return sent;
      },
      kRankAckBytes, deadline);
  if (!reply.ok()) return reply.status();
  if (reply->reply != RankHelloAck(protocol, secret, reply->nonce, sent)) {
    return Unavailable("the listener at the peer's address did not prove this epoch's secret");
  }
  return Status::Ok();
}

HandshakeOptions RankHelloOptions(const RankHelloProtocol& protocol, std::string what) {
  HandshakeOptions options;
  options.what = std::move(what);
  options.magic = protocol.magic;
  options.hello_bytes = kRankHelloBytes;
  return options;
}

}  // namespace ferry
