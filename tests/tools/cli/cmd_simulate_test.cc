// Tests of `ferry simulate` through its CLI11 subcommand: the report on a scaled preset, the
// planner's chunk sizes taken from --set planner.*_chunk_bytes (smaller chunks, more ops), and a
// size the planner cannot use, refused naming the option, the window taken from
// executor.max_in_flight as `ferry run` would, the simulator's --rate-slack, a skipped baseline
// reported as skipped, --dst-dtype (the baseline refused, saying why), progress lines on stderr, errors without status names, and the trace and
// SVG, whose plan is made after the layouts' other plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/tools/cli/run_cli_testutil.h"
#include "tools/cli/commands.h"

namespace ferry::cli {
namespace {

int RunCli(std::vector<std::string> argv) {
  return RunSubcommand(AddSimulateCommand, std::move(argv));
}

// DeepSeek-V3 at 1/64 from 4 trainer GPUs to 8 engine GPUs on two 8-GPU nodes: the engines'
// replicated tensors fan out inside the second node.
std::vector<std::string> SmallRefit(std::vector<std::string> extra) {
  std::vector<std::string> argv = {"simulate", "--model", "deepseek-v3", "--scale", "1/64",
                                   "--src", "megatron:pp=2,first=31,ep=2", "--dst", "vllm:tp=4,dp=2,ep=8",
                                   "--cluster", "dgx-h100", "--no-baseline"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// The reshard plan's op count from the report's "ops" row, or -1.
long ReshardOps(const std::string& report) {
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    long ops = -1;
    if (words >> first && first == "ops" && words >> ops) return ops;
  }
  return -1;
}

long SimulatedOps(std::vector<std::string> extra) {
  testing::internal::CaptureStdout();
  const int code = RunCli(SmallRefit(std::move(extra)));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("predicted time"), std::string::npos) << out;
  return ReshardOps(out);
}

TEST(SimulateCommand, ChunkSizeOptionsReachThePlanner) {
  const long defaults = SimulatedOps({});
  ASSERT_GT(defaults, 0);
  // 64 KiB chunks cut what the defaults (32, 16 and 8 MiB) send whole.
  EXPECT_GT(SimulatedOps({"--set", "planner.fanout_chunk_bytes=65536"}), defaults);
  EXPECT_GT(SimulatedOps({"--set", "planner.network_chunk_bytes=64KiB"}), defaults);
  // Every chain of this refit stays inside its node: no relays, so the relay size changes nothing.
  EXPECT_EQ(SimulatedOps({"--set", "planner.relay_chunk_bytes=65536"}), defaults);
}

// The report's "predicted time" row, or "" when it has none.
std::string PredictedRow(std::vector<std::string> extra) {
  testing::internal::CaptureStdout();
  const int code = RunCli(SmallRefit(std::move(extra)));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0) << out;
  const size_t at = out.find("predicted time");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// --no-baseline leaves the baseline unsimulated: its column reads "skipped" and no speed-up over
// it is claimed.
TEST(SimulateCommand, SkippedBaselineIsReportedAsSkipped) {
  testing::internal::CaptureStdout();
  const int code = RunCli(SmallRefit({}));
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(code, 0) << out;
  const std::string row = PredictedRow({});
  EXPECT_NE(row.find("skipped"), std::string::npos) << row;
  EXPECT_EQ(out.find("speed-up"), std::string::npos) << out;
}

// --dst-dtype converts the destination's weights as `ferry run --dst-dtype` does: the plan moves
// fp8 into the engine (the network carries half the bf16 refit's bytes, the sender converting),
// and the baseline, which does not convert, is reported as skipped with its reason while the
// reshard's prediction stands.
TEST(SimulateCommand, DestinationDtypeConvertsTheWeightsAndSkipsTheBaselineSayingWhy) {
  auto network_bytes = [](const std::string& report) {
    const size_t at = report.find("network bytes");
    return at == std::string::npos ? std::string() : report.substr(at, report.find('\n', at) - at);
  };
  std::vector<std::string> argv = SmallRefit({});
  argv.pop_back();  // --no-baseline
  testing::internal::CaptureStdout();
  ASSERT_EQ(RunCli(argv), 0);
  const std::string bf16 = testing::internal::GetCapturedStdout();
  argv.insert(argv.end(), {"--dst-dtype", "fp8_e4m3"});
  testing::internal::CaptureStdout();
  ASSERT_EQ(RunCli(argv), 0);
  const std::string fp8 = testing::internal::GetCapturedStdout();
  EXPECT_NE(fp8.find("weights as fp8_e4m3"), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("gather-broadcast skipped: "), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("does not convert"), std::string::npos) << fp8;
  EXPECT_NE(network_bytes(fp8), network_bytes(bf16)) << fp8 << bf16;
  EXPECT_EQ(fp8.find("speed-up"), std::string::npos) << fp8;
  argv.back() = "int7";
  testing::internal::CaptureStderr();
  EXPECT_NE(RunCli(argv), 0);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--dst-dtype int7"), std::string::npos);
}

TEST(SimulateCommand, WindowIsTheExecutorsMaxInFlightOption) {
  const std::string defaults = PredictedRow({});
  const std::string one_by_option = PredictedRow({"--set", "executor.max_in_flight=1"});
  ASSERT_FALSE(defaults.empty());
  EXPECT_NE(one_by_option, defaults);
  EXPECT_EQ(one_by_option, PredictedRow({"--max-in-flight", "1"}));
  EXPECT_EQ(defaults, PredictedRow({"--set", "executor.max_in_flight=256"}));
}

// --rate-slack takes a fraction of a link: 0 (every touched link recomputed) runs, a whole link
// is refused.
TEST(SimulateCommand, RateSlackIsAFractionOfALink) {
  EXPECT_FALSE(PredictedRow({"--rate-slack", "0"}).empty());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = RunCli(SmallRefit({"--rate-slack", "1"}));
  testing::internal::GetCapturedStdout();
  testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
}

// --progress S prints a line on stderr every S seconds of a stage (planning takes more than a
// millisecond here), never on stdout; the default of 5 s keeps this small refit quiet.
TEST(SimulateCommand, ProgressLinesGoToStderrForLongStagesOnly) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int code = RunCli(SmallRefit({"--progress", "0.001"}));
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_NE(err.find("ferry simulate: planning reshard: "), std::string::npos) << err;
  EXPECT_EQ(out.find("ferry simulate:"), std::string::npos) << out;

  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  code = RunCli(SmallRefit({}));
  out = testing::internal::GetCapturedStdout();
  err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_EQ(err, "");
}

// Errors print ferry's message without a status name, and --propagation-rounds below 0 is refused
// before anything is planned.
TEST(SimulateCommand, ErrorsNameTheInputWithoutStatusCodes) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  std::vector<std::string> argv = SmallRefit({});
  *std::find(argv.begin(), argv.end(), "dgx-h100") = "/no/such/cluster.yaml";
  int code = RunCli(argv);
  testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
  EXPECT_NE(err.find("ferry simulate: cannot open cluster file '/no/such/cluster.yaml'"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("NOT_FOUND"), std::string::npos) << err;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  code = RunCli(SmallRefit({"--propagation-rounds", "-1"}));
  const std::string out = testing::internal::GetCapturedStdout();
  testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
  EXPECT_EQ(out.find("model "), std::string::npos) << out;
}

// Bytes in the file at `path`, or -1 when it cannot be read.
long FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<long>(in.tellg()) : -1;
}

// The trace and the SVG come from a plan made after the simulations (which release the layouts
// once no later plan reads them), with the baseline skipped or simulated.
TEST(SimulateCommand, TraceAndSvgArePlannedAfterTheSimulations) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  for (const bool skip_baseline : {true, false}) {
    const std::string trace = dir + "/trace" + (skip_baseline ? "-skipped.json" : ".json");
    const std::string svg = dir + "/ingress" + (skip_baseline ? "-skipped.svg" : ".svg");
    std::vector<std::string> argv = SmallRefit({"--trace", trace, "--svg", svg});
    if (!skip_baseline) argv.erase(std::find(argv.begin(), argv.end(), "--no-baseline"));
    testing::internal::CaptureStdout();
    const int code = RunCli(argv);
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_EQ(code, 0) << out;
    EXPECT_NE(out.find("wrote Chrome trace"), std::string::npos) << out;
    EXPECT_GT(FileSize(trace), 0) << trace;
    EXPECT_GT(FileSize(svg), 0) << svg;
  }
}

TEST(SimulateCommand, RejectsChunksThePlannerCannotUse) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = RunCli(SmallRefit({"--set", "planner.relay_chunk_bytes=32"}));
  testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("'planner.relay_chunk_bytes' is 32; it must be at least 64"), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry::cli
