// The conformance suite for the `tcp` transport, over loopback.
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformanceTest,
                         ::testing::Values(ConformanceParams::For("tcp", {{"tcp.address", "127.0.0.1"}})),
                         ConformanceParamsName);

}  // namespace ferry::testing
