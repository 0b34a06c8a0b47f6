// `ferry run` refuses options it cannot honour before it starts a rank, naming the option, the
// value and the allowed range: a timeout that is not a positive duration, a fault on a rank the
// refit does not have, refit counts out of range, options every rank would refuse, and output
// files it could not write after the refits. Each case runs the real binary under a
// deadline; none starts rank processes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

// A four-rank refit small enough to plan in milliseconds.
std::vector<std::string> SmallRun(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "--model", "llama-3.1-8b", "--scale", "1/64",
                                   "--src", "megatron:tp=2", "--dst", "vllm:tp=2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

void ExpectRefusedBeforeLaunch(const std::vector<std::string>& extra, const std::string& expected) {
  SCOPED_TRACE(extra.front() + " " + extra.back());
  Outcome o = RunFerry(SmallRun(extra), 60);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(expected), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("local processes"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("INVALID_ARGUMENT"), std::string::npos) << "no C++ status names: " << o.output;
  EXPECT_FALSE(o.group_left_processes);
}

TEST(RunOptionsTest, ATimeoutThatIsNotAPositiveDurationIsRefused) {
  for (const char* value : {"0", "-1", "nan", "1e12"}) {
    ExpectRefusedBeforeLaunch({"--timeout", value},
                              std::string("--timeout ") + (std::string(value) == "1e12" ? "1e+12" : value) +
                                  ": the run's seconds must be in (0, 2592000] (30 days)");
  }
}

TEST(RunOptionsTest, AFaultOnARankTheRefitDoesNotHaveIsRefused) {
  ExpectRefusedBeforeLaunch({"--inject-fault", "1:kill:after=1,4:kill:mid"},
                            "--inject-fault: rank 4 is not in [0, 4), the ranks of this refit");
}

TEST(RunOptionsTest, RefitCountsOutOfRangeNameTheRange) {
  ExpectRefusedBeforeLaunch({"--iterations", "0"}, "--iterations: Value 0 not in range 1 to 1000000");
  ExpectRefusedBeforeLaunch({"--warmup", "-1"}, "--warmup: Value -1 not in range 0 to 1000000");
}

TEST(RunOptionsTest, BadValuesAreNamedWithoutStatusCodes) {
  ExpectRefusedBeforeLaunch({"--dst-dtype", "fp33"}, "ferry run: --dst-dtype fp33: unknown dtype 'fp33'");
  ExpectRefusedBeforeLaunch({"--strategy", "fastest"}, "ferry run: --strategy: unknown strategy 'fastest'");
}

TEST(RunOptionsTest, ConvertingWeightsWithTheBaselineIsRefused) {
  for (const char* strategy : {"gather-broadcast", "both"}) {
    ExpectRefusedBeforeLaunch({"--dst-dtype", "fp8_e4m3", "--strategy", strategy},
                              "--dst-dtype fp8_e4m3: the gather-and-broadcast baseline does not convert dtypes");
  }
}

TEST(RunOptionsTest, OptionsEveryRankWouldRefuseAreRefusedOnce) {
  ExpectRefusedBeforeLaunch({"--set", "executor.copy_threads=1000"},
                            "option 'executor.copy_threads' is 1000; it must be at most 256");
  ExpectRefusedBeforeLaunch({"--set", "tcp.prot=1"}, "--set tcp.prot=1: unknown option 'tcp.prot'");
  ExpectRefusedBeforeLaunch({"--set", "transport.intra_node=bogus"},
                            "option 'transport.intra_node': unknown transport 'bogus' (registered: ");
  ExpectRefusedBeforeLaunch({"--set", "deadline.abort=0s"}, "option 'deadline.abort' is 0.000000 s");
}

TEST(RunOptionsTest, OutputFilesThatCannotBeWrittenAreRefusedBeforeTheRefits) {
  ExpectRefusedBeforeLaunch({"--results", "/nonexistent-dir/results.csv"},
                            "--results /nonexistent-dir/results.csv: cannot open the file for writing");
  ExpectRefusedBeforeLaunch({"--save-plan", "/nonexistent-dir/plan.json"},
                            "--save-plan /nonexistent-dir/plan.json: cannot open the file for writing");
}

// The subcommand list says that `ferry run` refits CUDA memory too, and that only --verify checks.
TEST(RunOptionsTest, TheCommandListDescribesRunsMemoryAndVerification) {
  Outcome o = RunFerry({"--help"}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("a real refit on host memory (CUDA memory with --memory cuda)"),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("--verify checks in every destination"), std::string::npos) << o.output;
}

}  // namespace
