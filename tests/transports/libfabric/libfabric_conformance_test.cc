// The runtime's transport conformance suite for the `libfabric` transport (ranks as instances in
// one process), with each provider this machine has.
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(
    Libfabric, TransportConformanceTest,
    ::testing::Values(ConformanceParams::For("libfabric", {{"libfabric.provider", "tcp"}}),
                      ConformanceParams::For("libfabric", {{"libfabric.provider", "shm"}}),
                      ConformanceParams::For("libfabric", {{"libfabric.provider", "sockets"}})),
    ConformanceParamsName);

}  // namespace ferry::testing
