// process_suite_testutil: the multi-process transport scenarios (sizes 0 B to 256 MiB, many in
// flight completing out of order, same-tag ordering, truncation, one-sided put + notify where
// supported, a peer that exits, abort, epoch mismatch), written once as TEST_Ps of
// TransportProcessTest. A transport's test instantiates them:
//   INSTANTIATE_TEST_SUITE_P(Ucx, TransportProcessTest, ::testing::Values(TransportUnderTest{...}),
//                            TransportLabel);
// Scenarios skip by capability (one_sided).
#pragma once

#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "tests/transports/ucx/process_ranks_testutil.h"

namespace ferry::testing {

class TransportProcessTest : public ::testing::TestWithParam<TransportUnderTest> {};

// Prints the label, not the bytes, in gtest's messages.
inline void PrintTo(const TransportUnderTest& transport, std::ostream* out) {
  *out << transport.label;
}

std::string TransportLabel(const ::testing::TestParamInfo<TransportUnderTest>& info);

}  // namespace ferry::testing
