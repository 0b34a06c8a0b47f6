// `ferry run`'s samples: the per-transport traffic survives the trip through the store, a sample
// with hostile per-transport entries is refused with what is wrong, and rank 0's aggregate times
// the refit from the first start to the last end and reports how far apart the ranks started.
#include "tools/cli/run_report.h"

#include <gtest/gtest.h>

#include "core/runtime/store.h"

namespace ferry::cli {
namespace {

TEST(RankSampleTest, TrafficPerTransportRoundTrips) {
  RankSample sample;
  sample.start_ns = 10;
  sample.end_ns = 20;
  sample.bytes_sent = 300;
  sample.by_transport["tcp"] = TransportTraffic{100, 2, 50, 1};
  sample.by_transport[std::string(kDirectReadPath)] = TransportTraffic{0, 0, 4096, 3};
  auto decoded = RankSample::Decode(sample.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->bytes_sent, 300);
  ASSERT_EQ(decoded->by_transport.size(), 2u);
  EXPECT_EQ(decoded->by_transport["tcp"].bytes_sent, 100);
  EXPECT_EQ(decoded->by_transport["tcp"].messages_received, 1);
  EXPECT_EQ(decoded->by_transport["direct_read"].bytes_received, 4096);
}

TEST(RankSampleTest, HostileTransportEntriesAreRefused) {
  const std::string head = "1 2 3 4 5 0.5 6 ";
  EXPECT_NE(RankSample::Decode(head + "100000").status().message().find("at most 64"), std::string::npos);
  EXPECT_NE(RankSample::Decode(head + "2 tcp 1 1 1 1").status().message().find("entry 1 is cut short"),
            std::string::npos);
  EXPECT_NE(RankSample::Decode(head + "1 tcp -5 1 1 1").status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(RankSample::Decode(head + "1 t$p 1 1 1 1").ok());
  EXPECT_FALSE(RankSample::Decode(head + "1 " + std::string(65, 'a') + " 1 1 1 1").ok());
}

// Ranks starting at 100, 130 and 110 ns and ending at 400, 350 and 500 ns: the refit took 400 ns
// from the first start, of which the barrier's release spread the starts over 30 ns; the mean
// spread over two such refits, the second with starts 0 and 10 ns apart, is 20 ns.
TEST(RefitSampleTest, RefitTimeSpansFirstStartToLastEndAndReportsTheStartSpread) {
  InMemoryStore store;
  const Deadline deadline = Deadline::AfterSeconds(10);
  auto no_barrier = [] { return Status::Ok(); };
  const int64_t starts[3] = {100, 130, 110}, ends[3] = {400, 350, 500};
  Result<RefitSample> all = RefitSample{};
  for (int rank : {2, 1, 0}) {
    RankSample s;
    s.start_ns = starts[rank];
    s.end_ns = ends[rank];
    all = ShareSample(store, "refit1", rank, 3, s, deadline, no_barrier);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
  }
  EXPECT_NEAR(all->seconds, 400e-9, 1e-15);
  EXPECT_NEAR(all->start_spread_seconds, 30e-9, 1e-15);
  RefitSample second;
  second.seconds = 200e-9;
  second.start_spread_seconds = 10e-9;
  const VariantSummary summary = Summarize(RunVariant{"reshard"}, {*all, second});
  EXPECT_NEAR(summary.mean_start_spread, 20e-9, 1e-15);
  EXPECT_NEAR(summary.best, 200e-9, 1e-15);
}

}  // namespace
}  // namespace ferry::cli
