// The conformance suite for the `local` transport.
#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {

INSTANTIATE_TEST_SUITE_P(Local, TransportConformanceTest,
                         ::testing::Values(ConformanceParams::For("local")), ConformanceParamsName);

}  // namespace ferry::testing
