// TransportTraffic: summing.
#include "core/runtime/transport_traffic.h"

namespace ferry {

TransportTraffic& TransportTraffic::operator+=(const TransportTraffic& other) {
  bytes_sent += other.bytes_sent;
  messages_sent += other.messages_sent;
  bytes_received += other.bytes_received;
  messages_received += other.messages_received;
  return *this;
}

}  // namespace ferry
