// The conformance suite for the `tcp` transport, over loopback: at the default eager size, with
// every message of a byte or more by rendezvous (tcp.eager_bytes 0), and with every message of the
// tests but the largest sent eagerly (64 MiB), so that receives meet messages still arriving.
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(
    Tcp, TransportConformanceTest,
    ::testing::Values(ConformanceParams::For("tcp", {{"tcp.address", "127.0.0.1"}}),
                      ConformanceParams::For("tcp", {{"tcp.address", "127.0.0.1"}, {"tcp.eager_bytes", "0"}}),
                      ConformanceParams::For("tcp", {{"tcp.address", "127.0.0.1"}, {"tcp.eager_bytes", "64MiB"}})),
    ConformanceParamsName);

}  // namespace ferry::testing
