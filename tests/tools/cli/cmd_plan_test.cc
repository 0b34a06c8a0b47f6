// Tests of `ferry plan`: the report and its table for a small preset refit, JSON/DOT export,
// progress lines per step,
// layout-file mode, and the error paths (unknown model, bad framework spec, spec that does not fit
// the model, incompatible or missing layout files, conflicting arguments), through the library
// entry point and through the CLI11 subcommand.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/layout/layout.h"
#include "core/layout/layout_io.h"
#include "tests/tools/cli/run_cli_testutil.h"
#include "tools/cli/cmd_plan.h"
#include "tools/cli/commands.h"

namespace ferry::cli {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

PlanCommandArgs SmallPreset() {
  PlanCommandArgs args;
  args.model = "llama-3.1-8b";
  args.scale = 1.0 / 64;
  args.source_spec = "megatron:tp=2,pp=2";
  args.destination_spec = "vllm:tp=2,dp=2";
  args.gpus_per_node = 2;
  args.validate = true;
  return args;
}

TEST(PlanCommand, PresetReportComparesBothStrategies) {
  PlanCommandArgs args = SmallPreset();
  args.json_file = TempPath("plan.json");
  args.dot_file = TempPath("plan.dot");
  Result<PlanReport> report = RunPlanCommand(args);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->ranks, 8);
  EXPECT_EQ(report->nodes, 4);
  EXPECT_GT(report->tensors, 100);
  EXPECT_GT(report->source_fragments, report->tensors);
  EXPECT_GT(report->reshard.transfers, 0);
  EXPECT_GT(report->reshard.stats.messages, 0);
  // The destination is on other nodes than the source: every destination byte needs the network
  // or a relay; gather-and-broadcast moves the whole model to every destination rank.
  const int net = static_cast<int>(LinkClass::kNetwork);
  EXPECT_GT(report->gather_broadcast.stats.bytes_by_link[net],
            report->reshard.stats.bytes_by_link[net]);
  EXPECT_GT(report->gather_broadcast.stats.predicted_seconds,
            report->reshard.stats.predicted_seconds);
  EXPECT_GE(report->reshard.stats.predicted_seconds, report->reshard.stats.lower_bound.seconds);
  EXPECT_GT(report->reshard.planning_seconds, 0);
  // The reshard planner's passes are timed and add up to no more than the whole call.
  const PlanPhaseSeconds& phases = report->reshard.phases;
  EXPECT_GT(phases.intersect, 0);
  EXPECT_GT(phases.emit, 0);
  EXPECT_LE(phases.fold + phases.intersect + phases.route + phases.select + phases.order +
                phases.emit,
            report->reshard.planning_seconds);
  EXPECT_EQ(report->gather_broadcast.phases.emit, 0);

  const std::string table = FormatPlanReport(*report);
  for (const char* row : {"reshard", "gather-broadcast", "transfers", "messages",
                          "bytes network", "bytes same_node", "max node ingress", "lower bound",
                          "predicted time", "planning time", "ranks 8 on 4 nodes",
                          "reshard planning: fold stacks"}) {
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  }
  EXPECT_NE(table.find("megatron:tp=2,pp=2"), std::string::npos) << table;

  const std::string json = ReadFile(args.json_file);
  EXPECT_NE(json.find("\"strategy\":\"reshard\""), std::string::npos) << json.substr(0, 200);
  EXPECT_EQ(ReadFile(args.dot_file).rfind("digraph", 0), 0u);
}

// MoE presets name each layer's experts as tensor stacks unless a spec asks for members: the
// table counts the stacks, and the planner folds only what the layouts list member by member.
TEST(PlanCommand, ExpertStacksAreCountedAndFoldedOnlyWhenListedByMember) {
  PlanCommandArgs args = SmallPreset();
  args.model = "qwen3-30b-a3b";
  args.source_spec = "megatron:tp=2,pp=2,ep=4,etp=1";
  args.destination_spec = "vllm:tp=2,dp=2,ep=4";
  Result<PlanReport> stacked = RunPlanCommand(args);
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  const int64_t moe_layers = 48;  // qwen3-30b-a3b: every layer, 128 experts, 3 projections each
  EXPECT_EQ(stacked->tensor_stacks, 3 * moe_layers);
  EXPECT_EQ(stacked->stack_members, 3 * moe_layers * 128);
  EXPECT_EQ(stacked->reshard.stacks, 0);
  const std::string table = FormatPlanReport(*stacked);
  EXPECT_NE(table.find("(144 tensor stacks of 18,432)"), std::string::npos) << table;
  EXPECT_NE(table.find("fold stacks"), std::string::npos) << table;
  EXPECT_NE(table.find("(none to fold)"), std::string::npos) << table;

  args.source_spec += ",expert_tensors=members";
  args.destination_spec += ",expert_tensors=members";
  Result<PlanReport> members = RunPlanCommand(args);
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  EXPECT_EQ(members->tensor_stacks, 0);
  EXPECT_EQ(members->tensors, stacked->tensors - 3 * moe_layers + 3 * moe_layers * 128);
  EXPECT_GT(members->reshard.stacks, 0);
  // The same bytes either way.
  EXPECT_EQ(members->destination_bytes, stacked->destination_bytes);
  EXPECT_EQ(members->reshard.stats.bytes_by_link, stacked->reshard.stats.bytes_by_link);
}

TEST(PlanCommand, ProgressReportsEachStepInOrder) {
  PlanCommandArgs args = SmallPreset();
  args.json_file = TempPath("progress.json");
  args.dot_file = TempPath("progress.dot");
  std::vector<std::string> lines;
  args.progress = [&lines](const std::string& line) { lines.push_back(line); };
  ASSERT_TRUE(RunPlanCommand(args).ok());
  const std::vector<std::string> starts = {
      "layouts: llama-3.1-8b",
      "reshard: planned in ",
      "reshard: valid",
      "writing reshard plan JSON to " + args.json_file,
      "wrote reshard plan JSON to " + args.json_file + " (",
      "writing reshard plan DOT to " + args.dot_file,
      "wrote reshard plan DOT to " + args.dot_file + " (",
      "gather-broadcast: planned in ",
      "gather-broadcast: valid",
  };
  ASSERT_EQ(lines.size(), starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(starts[i], 0), 0u) << "line " << i << ": " << lines[i];
  }
  // Sizes of what was written, and of the plans.
  EXPECT_NE(lines[4].find("KiB"), std::string::npos) << lines[4];
  EXPECT_NE(lines[1].find(" ops, "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(" copy pairs)"), std::string::npos) << lines[1];
}

TEST(PlanCommand, StrategyPicksTheExportedPlan) {
  PlanCommandArgs args = SmallPreset();
  args.validate = false;
  args.strategy = Strategy::kGatherBroadcast;
  args.json_file = TempPath("gb.json");
  ASSERT_TRUE(RunPlanCommand(args).ok());
  EXPECT_NE(ReadFile(args.json_file).find("\"strategy\":\"gather-broadcast\""), std::string::npos);
}

TEST(PlanCommand, LayoutFiles) {
  Layout src, dst;
  TensorSpec t{"w", {8, 4}, DType::kBF16};
  const int s = src.AddTensor(t).value();
  const int d = dst.AddTensor(t).value();
  src.AppendFragment(s, Box::Make({0, 0}, {8, 4}).value(), 0, "b");
  dst.AppendFragment(d, Box::Make({0, 0}, {4, 4}).value(), 2, "b");
  dst.AppendFragment(d, Box::Make({4, 0}, {8, 4}).value(), 3, "b");
  PlanCommandArgs args;
  args.source_layout_file = TempPath("src.yaml");
  args.destination_layout_file = TempPath("dst.yaml");
  args.gpus_per_node = 2;
  ASSERT_TRUE(SaveLayoutFile(src, args.source_layout_file).ok());
  ASSERT_TRUE(SaveLayoutFile(dst, args.destination_layout_file).ok());
  Result<PlanReport> report = RunPlanCommand(args);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->ranks, 4);
  EXPECT_EQ(report->destination_bytes, 8 * 4 * 2);
  EXPECT_EQ(report->reshard.stats.bytes_by_link[static_cast<int>(LinkClass::kNetwork)], 64);

  // Incompatible: the destination tensor has another shape.
  Layout other;
  const int o = other.AddTensor(TensorSpec{"w", {8, 8}, DType::kBF16}).value();
  other.AppendFragment(o, Box::Make({0, 0}, {8, 8}).value(), 1, "b");
  args.destination_layout_file = TempPath("other.yaml");
  ASSERT_TRUE(SaveLayoutFile(other, args.destination_layout_file).ok());
  Result<PlanReport> bad = RunPlanCommand(args);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("incompatible layouts"), std::string::npos)
      << bad.status().message();
}

TEST(PlanCommand, BlockScaledDestinationPlansReshardAndSaysWhyNoBaseline) {
  PlanCommandArgs args;
  args.source_layout_file = "tests/tools/cli/testdata/fp8_block_src.yaml";
  args.destination_layout_file = "tests/tools/cli/testdata/fp8_block_dst.yaml";
  args.validate = true;
  Result<PlanReport> report = RunPlanCommand(args);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->reshard.stats.ops, 0);
  EXPECT_NE(report->gather_broadcast_refused.find("does not quantize"), std::string::npos)
      << report->gather_broadcast_refused;
  const std::string text = FormatPlanReport(*report);
  EXPECT_NE(text.find("gather-broadcast: gather-broadcast planning: the gather-and-broadcast baseline does not quantize"), std::string::npos)
      << text;
  EXPECT_NE(text.find("reshard  gather-broadcast"), std::string::npos) << text;
  const size_t ops = text.find("\nops");
  ASSERT_NE(ops, std::string::npos) << text;
  const std::string ops_row = text.substr(ops + 1, text.find('\n', ops + 1) - ops - 1);
  EXPECT_EQ(ops_row.back(), '-') << ops_row;
  // Exporting the baseline's plan is asked for, so its refusal is the error.
  args.strategy = Strategy::kGatherBroadcast;
  EXPECT_FALSE(RunPlanCommand(args).ok());
}

// --dst-dtype plans the destination's weights in fp8 as `ferry run --dst-dtype` does; the
// baseline, which does not convert, is refused with its reason and the reshard reported alone.
TEST(PlanCommand, DestinationDtypePlansReshardAndSaysWhyNoBaseline) {
  PlanCommandArgs args;
  args.model = "llama-3.1-8b";
  args.scale = 1.0 / 64;
  args.source_spec = "megatron:tp=2";
  args.destination_spec = "vllm:tp=2";
  Result<PlanReport> bf16 = RunPlanCommand(args);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  args.destination_dtype = "fp8_e4m3";
  Result<PlanReport> fp8 = RunPlanCommand(args);
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  EXPECT_NE(fp8->description.find("(weights as fp8_e4m3)"), std::string::npos) << fp8->description;
  EXPECT_LT(fp8->destination_bytes, bf16->destination_bytes);
  EXPECT_NE(fp8->gather_broadcast_refused.find("does not convert"), std::string::npos)
      << fp8->gather_broadcast_refused;
  args.destination_dtype = "int7";
  Result<PlanReport> bad = RunPlanCommand(args);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dst-dtype int7"), std::string::npos) << bad.status().message();
}

struct BadCase {
  const char* what;
  PlanCommandArgs args;
  const char* expected;  // substring of the error
};

TEST(PlanCommand, BadInputsGiveClearErrors) {
  std::vector<BadCase> cases;
  PlanCommandArgs a = SmallPreset();
  a.model = "gpt-17";
  cases.push_back({"unknown model", a, "gpt-17"});
  a = SmallPreset();
  a.source_spec = "megatorn:tp=2";
  cases.push_back({"unknown framework", a, "--src megatorn:tp=2"});
  a = SmallPreset();
  a.destination_spec = "vllm:tp=two";
  cases.push_back({"non-numeric value", a, "--dst vllm:tp=two"});
  a = SmallPreset();
  a.source_spec = "megatron:tp=3";
  cases.push_back({"spec does not fit the model", a, "megatron:tp=3"});
  a = SmallPreset();
  a.destination_spec.clear();
  cases.push_back({"missing --dst", a, "--src and --dst"});
  a = SmallPreset();
  a.gpus_per_node = 0;
  cases.push_back({"bad gpus per node", a, "gpus"});
  a = SmallPreset();
  a.source_layout_file = "x.yaml";
  cases.push_back({"both modes", a, "either --model"});
  a = PlanCommandArgs();
  cases.push_back({"nothing", a, "either --model"});
  a = PlanCommandArgs();
  a.source_layout_file = TempPath("does-not-exist.yaml");
  a.destination_layout_file = TempPath("does-not-exist.yaml");
  cases.push_back({"missing file", a, "--src-layout"});
  a = PlanCommandArgs();
  a.source_layout_file = TempPath("only-src.yaml");
  cases.push_back({"one layout file", a, "together"});
  for (const BadCase& c : cases) {
    Result<PlanReport> r = RunPlanCommand(c.args);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.what << ": " << r.status().message();
  }
}

// The chunk sizes reach the planner through --set: smaller fan-out and network chunks mean more
// messages; a size the planner cannot use fails naming the option.
TEST(PlanCommand, ChunkSizesReachThePlanner) {
  const Result<PlanReport> defaults = RunPlanCommand(SmallPreset());
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  PlanCommandArgs small = SmallPreset();
  small.config.settings = {"planner.network_chunk_bytes=64KiB", "planner.fanout_chunk_bytes=64KiB"};
  const Result<PlanReport> chunked = RunPlanCommand(small);
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_GT(chunked->reshard.stats.messages, defaults->reshard.stats.messages);
  PlanCommandArgs bad = SmallPreset();
  bad.config.settings = {"planner.relay_chunk_bytes=0"};
  const Result<PlanReport> rejected = RunPlanCommand(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("'planner.relay_chunk_bytes' is 0; it must be at least 64"),
            std::string::npos)
      << rejected.status().message();
}

// A YAML config file in the test's scratch directory.
std::string ConfigFile(const std::string& yaml) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/plan_config.yaml";
  std::ofstream(path) << yaml;
  return path;
}

int RunCli(std::vector<std::string> argv) {
  return RunSubcommand(AddPlanCommand, std::move(argv));
}

TEST(PlanCommand, CliExitCodes) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunCli({"plan", "--model", "llama-3.1-8b", "--scale", "1/64", "--src",
                    "megatron:tp=2,pp=2", "--dst", "vllm:tp=2,dp=2", "--gpus-per-node", "2"}),
            0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("predicted time"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(
      RunCli({"plan", "--model", "llama-3.1-8b", "--scale", "1/64", "--src", "megatron:tp=2,pp=2",
              "--dst", "vllm:tp=2,dp=2", "--gpus-per-node", "2", "--set", "planner.fanout_chunk_bytes=64KiB",
              "--set", "planner.relay_chunk_bytes=65536", "--config", ConfigFile("planner:\n  network_chunk_bytes: 64KiB\n")}),
      0);
  testing::internal::GetCapturedStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunCli({"plan", "--model", "no-such-model", "--src", "megatron:tp=1", "--dst",
                    "vllm:tp=1"}),
            1);
  EXPECT_EQ(RunCli({"plan", "--model", "llama-3.1-8b", "--src", "megatron:tp=1", "--dst",
                    "vllm:tp=1", "--strategy", "broadcast-everything"}),
            2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no-such-model"), std::string::npos) << err;
  EXPECT_NE(err.find("broadcast-everything"), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry::cli
