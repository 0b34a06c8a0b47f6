// The runtime's transport conformance suite for the `ucx` transport (ranks as instances in one
// process), over UCX's tcp transport and over sm,tcp.
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(Ucx, TransportConformanceTest,
                         ::testing::Values(ConformanceParams::For("ucx", {{"ucx.tls", "tcp"}}),
                                           ConformanceParams::For("ucx", {{"ucx.tls", "sm,tcp"}})),
                         ConformanceParamsName);

}  // namespace ferry::testing
