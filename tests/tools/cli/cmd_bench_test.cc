// ferry bench's pure pieces: sizes, CSV, table and the SVG chart.
#include "tools/cli/cmd_bench.h"

#include <gtest/gtest.h>

namespace ferry::cli {
namespace {

std::vector<SweepSeries> TwoSeries() {
  SweepSeries a{"tcp", 1, {{4096, 100, 0.001, 20e-6}, {65536, 10, 0.0005, 40e-6}}};
  SweepSeries b{"ucx sm+tcp", 4, {{4096, 100, 0.0005, 10e-6}, {65536, 10, 0.0002, 30e-6}}};
  return {a, b};
}

TEST(CmdBenchTest, SweepSizesArePowersOfFourUpToTheMaximum) {
  EXPECT_EQ(SweepSizes(4096, 64 << 20),
            (std::vector<int64_t>{4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20,
                                  64 << 20}));
  EXPECT_EQ(SweepSizes(1000, 5000), (std::vector<int64_t>{1000, 4000, 5000}));
}

TEST(CmdBenchTest, CsvAndTableCarryEveryPoint) {
  const std::string csv = SweepCsv(TwoSeries());
  EXPECT_EQ(csv.rfind("transport,size_bytes,messages,stream_seconds,stream_GBps,single_message_us,"
                      "pairs\n", 0), 0u);
  EXPECT_NE(csv.find("tcp,4096,100,0.001000000,0.4096,20.00,1\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("ucx sm+tcp,65536,10,0.000200000,3.2768,30.00,4\n"), std::string::npos) << csv;
  const std::string table = SweepTable(TwoSeries());
  EXPECT_NE(table.find("4 KiB"), std::string::npos) << table;
  EXPECT_NE(table.find("64 KiB"), std::string::npos) << table;
  EXPECT_NE(table.find("0.41 GB/s"), std::string::npos) << table;
}

TEST(CmdBenchTest, SvgHasAxesLegendAndOneLinePerTransport) {
  const std::string svg = SweepSvg(TwoSeries(), "title here");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("message size (log scale)"), std::string::npos);
  EXPECT_NE(svg.find("GB/s"), std::string::npos);
  EXPECT_NE(svg.find(">tcp</text>"), std::string::npos);
  EXPECT_NE(svg.find(">ucx sm+tcp</text>"), std::string::npos);
  EXPECT_NE(svg.find(">4 KiB</text>"), std::string::npos);
  EXPECT_NE(svg.find(">64 KiB</text>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u);
}

}  // namespace
}  // namespace ferry::cli
