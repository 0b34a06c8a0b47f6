// `ferry run`'s samples: the start instant and the per-transport traffic survive the trip through
// the store, a sample with hostile per-transport entries is refused with what is wrong, and rank
// 0's aggregate times the refit from the agreed start instant to the last end and reports how late
// the last rank started after that instant; the memcpy reference's size does not grow with the
// model.
#include "tools/cli/run_report.h"

#include <gtest/gtest.h>

#include "core/runtime/store.h"

namespace ferry::cli {
namespace {

TEST(RankSampleTest, InstantAndTrafficPerTransportRoundTrip) {
  RankSample sample;
  sample.start_ns = 10;
  sample.end_ns = 20;
  sample.instant_ns = 9;
  sample.known_ns = 8;
  sample.bytes_sent = 300;
  sample.bytes_delivered = 2024;
  sample.bytes_quantized_direct = 1536;
  sample.bytes_read_packed = 512;
  sample.by_transport["tcp"] = TransportTraffic{100, 2, 50, 1};
  sample.by_transport[std::string(kDirectReadPath)] = TransportTraffic{0, 0, 4096, 3};
  auto decoded = RankSample::Decode(sample.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->bytes_sent, 300);
  EXPECT_EQ(decoded->instant_ns, 9);
  EXPECT_EQ(decoded->known_ns, 8);
  EXPECT_EQ(decoded->bytes_delivered, 2024);
  EXPECT_EQ(decoded->bytes_quantized_direct, 1536);
  EXPECT_EQ(decoded->bytes_read_packed, 512);
  ASSERT_EQ(decoded->by_transport.size(), 2u);
  EXPECT_EQ(decoded->by_transport["tcp"].bytes_sent, 100);
  EXPECT_EQ(decoded->by_transport["tcp"].messages_received, 1);
  EXPECT_EQ(decoded->by_transport["direct_read"].bytes_received, 4096);
}

TEST(RankSampleTest, HostileTransportEntriesAreRefused) {
  const std::string head = "1 2 3 4 5 0.5 6 7 8 9 10 11 ";
  EXPECT_NE(RankSample::Decode("1 2 3 4 5 0.5 6 7 8 -9 0 0 0").status().message().find("negative bytes delivered"),
            std::string::npos);
  EXPECT_NE(RankSample::Decode("1 2 3 4 5 0.5 6 7 8 9 -10 0 0").status().message().find("negative bytes quantized"),
            std::string::npos);
  EXPECT_NE(RankSample::Decode("1 2 3 4 5 0.5 6 7 8 9 10 -11 0").status().message().find("negative bytes read packed"),
            std::string::npos);
  EXPECT_NE(RankSample::Decode(head + "100000").status().message().find("at most 64"), std::string::npos);
  EXPECT_NE(RankSample::Decode(head + "2 tcp 1 1 1 1").status().message().find("entry 1 is cut short"),
            std::string::npos);
  EXPECT_NE(RankSample::Decode(head + "1 tcp -5 1 1 1").status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(RankSample::Decode(head + "1 t$p 1 1 1 1").ok());
  EXPECT_FALSE(RankSample::Decode(head + "1 " + std::string(65, 'a') + " 1 1 1 1").ok());
}

// Three ranks told to start at 1000 ns learn it at 900, 960 and 940 ns, start at 1000, 1030 and
// 1010 ns and end at 1400, 1350 and 1500 ns: the refit took 500 ns from the instant, the last rank
// started 30 ns after it, and the last to learn it did so 40 ns before it; the mean spread over two
// such refits, the second 10 ns, is 20 ns.
TEST(RefitSampleTest, RefitTimeSpansTheInstantToTheLastEndAndTheSpreadIsMeasuredFromTheInstant) {
  InMemoryStore store;
  const Deadline deadline = Deadline::AfterSeconds(10);
  auto no_barrier = [] { return Status::Ok(); };
  const int64_t known[3] = {900, 960, 940}, starts[3] = {1000, 1030, 1010}, ends[3] = {1400, 1350, 1500};
  Result<RefitSample> all = RefitSample{};
  for (int rank : {2, 1, 0}) {
    RankSample s;
    s.instant_ns = 1000;
    s.known_ns = known[rank];
    s.start_ns = starts[rank];
    s.end_ns = ends[rank];
    s.bytes_delivered = 100 * (rank + 1);
    all = ShareSample(store, "refit1", rank, 3, s, deadline, no_barrier);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
  }
  EXPECT_NEAR(all->seconds, 500e-9, 1e-15);
  EXPECT_NEAR(all->start_spread_seconds, 30e-9, 1e-15);
  EXPECT_NEAR(all->start_slack_seconds, 40e-9, 1e-15);
  EXPECT_EQ(all->bytes_delivered, 600);  // summed over the ranks
  RefitSample second;
  second.seconds = 200e-9;
  second.start_spread_seconds = 10e-9;
  const VariantSummary summary = Summarize(RunVariant{"reshard"}, {*all, second});
  EXPECT_NEAR(summary.mean_start_spread, 20e-9, 1e-15);
  EXPECT_NEAR(summary.best, 200e-9, 1e-15);
}

RankSample Sample(int64_t known, int64_t start, int64_t end) {
  RankSample s;
  s.instant_ns = 1000;
  s.known_ns = known;
  s.start_ns = start;
  s.end_ns = end;
  return s;
}

// A rank that learned the instant 20 ns after it had passed and started 200 ns late: its delay is
// the start spread and part of the refit time, and the slack is negative.
TEST(RefitSampleTest, ARankThatStartsLateIsCountedFromTheInstant) {
  const RefitSample all = AggregateSamples({Sample(900, 1000, 1400), Sample(1020, 1200, 1500)});
  EXPECT_NEAR(all.seconds, 500e-9, 1e-15);
  EXPECT_NEAR(all.start_spread_seconds, 200e-9, 1e-15);
  EXPECT_NEAR(all.start_slack_seconds, -20e-9, 1e-15);
}

// A rank whose clock runs ahead of rank 0's starts before the instant by rank 0's clock: the refit
// is timed from that earlier start, so none of its work goes uncounted.
TEST(RefitSampleTest, AStartBeforeTheInstantIsTimedFromThatStart) {
  const RefitSample all = AggregateSamples({Sample(900, 1000, 1400), Sample(900, 990, 1500)});
  EXPECT_NEAR(all.seconds, 510e-9, 1e-15);
  EXPECT_NEAR(all.start_spread_seconds, 0, 1e-15);
}

// The reference copy's two buffers come on top of the refit's own on rank 0: a 33 GiB refit
// (Llama-3.1-70B at 1/2, two ranks a side) must not ask for 66 GiB more.
TEST(MemcpyReferenceTest, CopiesTheDeliveredBytesClampedBetweenOneMiBAndOneGiB) {
  EXPECT_EQ(MemcpyReferenceBytes(int64_t{33} << 30), int64_t{1} << 30);
  EXPECT_EQ(MemcpyReferenceBytes((int64_t{1} << 30) + 1), int64_t{1} << 30);
  EXPECT_EQ(MemcpyReferenceBytes(int64_t{300} << 20), int64_t{300} << 20);
  EXPECT_EQ(MemcpyReferenceBytes(4096), int64_t{1} << 20);
  EXPECT_EQ(MemcpyReferenceBytes(0), int64_t{1} << 20);
}

}  // namespace
}  // namespace ferry::cli
