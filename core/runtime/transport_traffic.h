// TransportTraffic: what one way of moving bytes carried for one rank in one run, so that the
// executor, the refit facade and the CLI can say which transport moved how many bytes. Plain data.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry {

// The plan payload one way of moving bytes carried for one rank: a transport by its configured
// name ("tcp", "local", "fault"), or kDirectReadPath for same-node direct reads (whose bytes the
// reader copies; the sender sends nothing). Direct-read offers and acks are control messages and
// are not counted, so the received bytes of every path add up to the plan's message bytes.
struct TransportTraffic {
  int64_t bytes_sent = 0, messages_sent = 0;
  int64_t bytes_received = 0, messages_received = 0;
  TransportTraffic& operator+=(const TransportTraffic& other);
};
inline constexpr std::string_view kDirectReadPath = "direct_read";

}  // namespace ferry
