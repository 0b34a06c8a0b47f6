// `ferry run`'s samples: the per-transport traffic survives the trip through the store, and a
// sample with hostile per-transport entries is refused with what is wrong.
#include "tools/cli/run_report.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ferry::cli
