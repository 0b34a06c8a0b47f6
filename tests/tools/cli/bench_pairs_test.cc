// `ferry bench transports --pairs N` end to end: the real binary launches 2N rank processes, N
// sender -> receiver pairs stream at once, and sweep.csv holds one row per transport and size with
// the pairs' messages together, a positive aggregate rate that matches bytes / time, and the pair
// count. The launch runs under a deadline and kills its process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

std::vector<std::vector<std::string>> ReadCsvRows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

TEST(BenchPairsTest, ThreePairsOfProcessesStreamAtOnceOverTcpAndDirectReads) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/bench-pairs";
  Outcome o = RunFerry({"bench", "transports", "--out", out, "--only", "tcp", "--skip-plan",
                        "--pairs", "3", "--min-size", "64KiB", "--max-size", "256KiB",
                        "--stream-bytes", "1MiB", "--repetitions", "1", "--timeout", "100"},
                       120);
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("3 pair(s) of ranks at once"), std::string::npos) << o.output;
  const auto rows = ReadCsvRows(out + "/sweep.csv");
  ASSERT_EQ(rows.size(), 5u);  // header, {tcp, direct read} x {64 KiB, 256 KiB}
  EXPECT_EQ(rows[0].back(), "pairs");
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::vector<std::string>& r = rows[i];
    ASSERT_EQ(r.size(), 7u);
    const int64_t size = std::stoll(r[1]);
    const int64_t messages = std::stoll(r[2]);
    const double seconds = std::stod(r[3]);
    const double gbps = std::stod(r[4]);
    EXPECT_TRUE(r[0] == "tcp" || r[0] == "direct read") << r[0];
    EXPECT_EQ(messages, 3 * (int64_t{1 << 20} / size)) << "every pair streams 1 MiB";
    EXPECT_GT(seconds, 0);
    EXPECT_NEAR(gbps, messages * size / seconds / 1e9, 1e-3 + gbps * 1e-3);
    EXPECT_GT(std::stod(r[5]), 0) << "one message a pair alone";
    EXPECT_EQ(r[6], "3");
  }
}

}  // namespace
