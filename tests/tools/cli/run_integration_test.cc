// `ferry run` end to end: the real binary launches one process per rank and verifies every
// destination byte, over ucx, libfabric and tcp; fused vLLM destinations (qkv, gate_up, w13),
// vLLM's Mamba A stored as -exp(A_log), uneven and strided layouts from files, a hybrid Mamba
// model from distributed-optimizer buffers, DeepSeek-V3's MTP layer, --memory cuda (or its error
// where there is no GPU), a leak check over 200 refits, refits timed from the instant every rank
// starts at, the smallest staging budget with a window of one message, ranks waiting for each
// other's long work past deadline.store, and failures that must end with every rank process gone.
// Each case runs under a deadline and kills the process group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

// The transports rank 0 reports on its "transports in use:" line.
std::string TransportsInUse(const std::string& output) {
  const size_t at = output.find("transports in use: ");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

void ExpectVerified(const Outcome& o, int strategies) {
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_EQ(Count(o.output, "bit-exact"), strategies) << o.output;
}

TEST(RunIntegrationTest, QwenMoeFusedW13OverUcxBothStrategies) {
  // vLLM fuses qkv_proj and w13 (gate and up of every expert); Megatron interleaves qkv.
  Outcome o = RunFerry({"run", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
                        "megatron:tp=2,ep=2", "--dst", "vllm:tp=2,dp=2", "--colocated",
                        "--transport", "ucx", "--strategy", "both", "--verify"},
                       120);
  // reshard, reshard through the transport alone, gather-broadcast.
  ExpectVerified(o, 3);
  EXPECT_NE(TransportsInUse(o.output).find("ucx"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("both through the transport alone (direct reads off)"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("reshard with direct reads between ranks of one node is"), std::string::npos) << o.output;
  // One node: reshard messages go as direct reads (the baseline's relayed chunks cannot).
  const size_t row = o.output.find("read from peers directly");
  ASSERT_NE(row, std::string::npos) << o.output;
  EXPECT_NE(o.output.substr(row, o.output.find('\n', row) - row).find("MiB"), std::string::npos)
      << o.output;
}

// The report's row `label`, from the label to the end of its line.
std::string RowOf(const std::string& output, const std::string& label) {
  const size_t row = output.find(label);
  return row == std::string::npos ? std::string() : output.substr(row, output.find('\n', row) - row);
}

// fp8 weights on the destination: verified against the CPU reference, with direct reads (the
// receiver converts while reading; on host memory `auto` never packs), with direct reads the
// senders pack (executor.convert_on_sender=always: the receivers copy fp8 from the senders'
// staging), and through tcp alone (the sender packs and converts).
TEST(RunIntegrationTest, Fp8DestinationWeightsVerifiedWithAndWithoutDirectReads) {
  for (const char* setting : {"executor.direct_intra_node=true", "executor.convert_on_sender=always",
                              "executor.direct_intra_node=false"}) {
    Outcome o = RunFerry({"run", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
                          "megatron:tp=2,ep=2", "--dst", "vllm:tp=2", "--dst-dtype", "fp8_e4m3",
                          "--verify", "--iterations", "1", "--warmup", "0", "--set", setting},
                         120);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(Count(o.output, "bit-exact to the CPU conversion reference"), 1) << o.output;
    EXPECT_NE(o.output.find("(weights as fp8_e4m3)"), std::string::npos) << o.output;
    const std::string packed = RowOf(o.output, "of which packed by senders");
    ASSERT_FALSE(packed.empty()) << o.output;
    const bool packs = std::string(setting) == "executor.convert_on_sender=always";
    EXPECT_EQ(packed.find("iB") != std::string::npos, packs) << packed;
  }
}

// Block-scaled fp8 destinations (testdata/fp8_block_*.yaml): blocks gathering rows and columns
// from both source ranks and two tensors, partial edge blocks, a stack of experts split per
// matrix; values and scales verified against the CPU block-quantization reference, over tcp
// alone and with direct reads (which copy into the twins on the receivers).
TEST(RunIntegrationTest, BlockScaledFp8DestinationQuantizedAndVerified) {
  for (const char* direct : {"true", "false"}) {
    Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                          "tests/tools/cli/testdata/fp8_block_dst.yaml", "--strategy", "reshard", "--verify",
                          "--iterations", "2", "--warmup", "0", "--set",
                          std::string("executor.direct_intra_node=") + direct},
                         60);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(Count(o.output, "fp8 values and scales to the CPU block-quantization reference"), 1) << o.output;
    // With direct reads the receivers copy the bf16 values straight into the quantizer's staging.
    const bool direct_reads = std::string(direct) == "true";
    EXPECT_EQ(Count(o.output, "received over direct_read"), direct_reads ? 1 : 0) << o.output;
    EXPECT_EQ(Count(o.output, "received over tcp"), direct_reads ? 0 : 1) << o.output;
  }
}

// Barriers behind which ranks fill, run or verify for longer than deadline.store wait for them:
// Llama-3.1-8B at 1/4 into vLLM's block-scaled fp8 (957.5 MiB of bf16) quantizes and verifies on
// the receivers for seconds each on this machine while the senders wait, under a store deadline of
// one second. With deadline.store on those barriers the senders gave up ("barrier
// 'run/reshard/e1/0/published' ... reached 2 of 4"), as 33 GiB did at the default minute on an H200.
TEST(RunIntegrationTest, RanksWaitForEachOthersLongWorkBeyondTheStoreDeadline) {
  Outcome o = RunFerry({"run", "--model", "llama-3.1-8b", "--scale", "1/4", "--src", "megatron:tp=2", "--dst",
                        "vllm:tp=2,quant=fp8_block", "--strategy", "reshard", "--verify", "--set",
                        "deadline.store=1s"},
                       120);
  ExpectVerified(o, 1);
}

// The same refit into UE8M0 scales on two of the three buffers (testdata/fp8_block_ue8m0_dst.yaml):
// the Quantize ops requantize to power-of-two scales where the layout asks, and the verify checks
// values and scales against the CPU reference of each buffer's format.
TEST(RunIntegrationTest, Ue8m0BlockScaledFp8DestinationQuantizedAndVerified) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                        "tests/tools/cli/testdata/fp8_block_ue8m0_dst.yaml", "--strategy", "reshard", "--verify",
                        "--iterations", "2", "--warmup", "0"},
                       60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(Count(o.output, "fp8 values and scales to the CPU block-quantization reference (UE8M0 scales"), 1)
      << o.output;
}

// The same with the UE8M0 scales packed as DeepGEMM keeps them on SM100
// (testdata/fp8_block_ue8m0_packed_dst.yaml): the Quantize ops write the int32 words, padding rows
// included, and the verify compares every scale word with the CPU reference's.
TEST(RunIntegrationTest, Ue8m0PackedBlockScaledFp8DestinationQuantizedAndVerified) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                        "tests/tools/cli/testdata/fp8_block_ue8m0_packed_dst.yaml", "--strategy", "reshard",
                        "--verify", "--iterations", "2", "--warmup", "0"},
                       60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(Count(o.output, "fp8 values and scales to the CPU block-quantization reference (UE8M0 scales"), 1)
      << o.output;
}

// nemotron-h-8b's Mamba mixers: vLLM stores A as fp32 -exp(A_log), Megatron A_log as is. Megatron
// TP2 -> vLLM TP1 with both strategies, with direct reads and through tcp alone: the verify
// expects -std::exp of the source pattern in every A, bit for bit, so a plan that copied or
// merely widened A_log fails it.
TEST(RunIntegrationTest, NemotronMambaAIsMinusExpOfALogVerified) {
  for (const char* direct : {"true", "false"}) {
    Outcome o = RunFerry({"run", "--model", "nemotron-h-8b", "--scale", "1/16", "--src", "megatron:tp=2",
                          "--dst", "vllm:tp=1", "--strategy", "both", "--verify", "--iterations", "1",
                          "--warmup", "0", "--set", std::string("executor.direct_intra_node=") + direct},
                         120);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    // reshard, (with direct reads) reshard through the transport alone, gather-broadcast.
    const int strategies = std::string(direct) == "true" ? 3 : 2;
    EXPECT_EQ(Count(o.output, "bit-exact, A = -exp(A_log) to the CPU reference (std::exp)"), strategies)
        << o.output;
  }
}

// The 4th field of the one row `ferry run --results` appended: bytes delivered to destination
// fragments; -1 when the file has no such row.
int64_t DeliveredBytes(const std::string& csv) {
  std::ifstream in(csv);
  std::string row;
  std::getline(in, row);
  std::stringstream fields(row);
  std::string field;
  for (int i = 0; i < 4 && std::getline(fields, field, ','); ++i) {
  }
  return field.empty() ? -1 : std::stoll(field);
}

// DeepSeek-V3 with its MTP layer on both sides: Megatron's MTP block on the last of two pipeline
// stages -> vLLM's drafter on both TP ranks, every destination byte verified; the drafter's bytes
// are delivered on top of those of the same refit without MTP.
TEST(RunIntegrationTest, DeepseekMtpLayerVerified) {
  int64_t delivered[2] = {0, 0};
  for (int mtp : {0, 1}) {
    const std::string on = mtp == 1 ? ",mtp=1" : "";
    const std::string csv =
        std::string(std::getenv("TEST_TMPDIR")) + "/mtp" + std::to_string(mtp) + ".csv";
    Outcome o = RunFerry({"run", "--model", "deepseek-v3", "--scale", "1/256", "--src",
                          "megatron:tp=2,pp=2,first=31" + on, "--dst", "vllm:tp=2" + on,
                          "--strategy", "reshard", "--verify", "--iterations", "1", "--warmup",
                          "0", "--results", csv},
                         120);
    ExpectVerified(o, 1);
    delivered[mtp] = DeliveredBytes(csv);
  }
  EXPECT_GT(delivered[0], 0);
  EXPECT_GT(delivered[1], delivered[0]);
}

// A flipped fp8 byte is named by buffer, matrix and element; the baseline refuses to quantize.
TEST(RunIntegrationTest, BlockScaledFp8VerifyNamesAWrongByteAndTheBaselineRefuses) {
  ::setenv("FERRY_INJECT_FAULT", "2:corrupt:verify", 1);
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                        "tests/tools/cli/testdata/fp8_block_dst.yaml", "--strategy", "reshard", "--verify",
                        "--iterations", "1", "--warmup", "0"},
                       60);
  ::unsetenv("FERRY_INJECT_FAULT");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("rank 2 failed verification"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("buffer 'ab' matrix 0 element [0, 0]"), std::string::npos) << o.output;
  Outcome baseline = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                               "tests/tools/cli/testdata/fp8_block_dst.yaml", "--strategy", "gather-broadcast"},
                              60);
  EXPECT_NE(baseline.exit_code, 0) << baseline.output;
  EXPECT_NE(baseline.output.find("does not quantize"), std::string::npos) << baseline.output;
}

// The next two turn direct reads off so that the transport carries every byte.
TEST(RunIntegrationTest, LlamaFusedQkvGateUpOverLibfabric) {
  Outcome o = RunFerry({"run", "--model", "llama-3.1-8b", "--scale", "1/64", "--src",
                        "megatron:tp=2,pp=2", "--dst", "vllm:tp=4", "--colocated", "--transport",
                        "libfabric", "--verify", "--set", "executor.direct_intra_node=false"},
                       90);
  ExpectVerified(o, 1);
  EXPECT_NE(TransportsInUse(o.output).find("libfabric"), std::string::npos) << o.output;
}

// nemotron-h-8b (hybrid Mamba-2) read from Megatron's distributed-optimizer buffers: over pp=2 with
// --overlap-grad-reduce, and over a '|' pattern of four segments (two model chunks a rank) with
// the transport carrying every byte; the destination is Megatron on one rank.
TEST(RunIntegrationTest, HybridMambaModelFromDistributedOptimizerBuffers) {
  const std::string piped = "M-M-M-M*-M-M-|M-M-M*-M-M-M-M|-M*-M-M-M-M-M*-|M-M-M-M-M-";
  for (const std::string& src :
       {std::string("megatron:tp=2,pp=2,buffers=distopt,overlap_grad_reduce=yes"),
        "megatron:tp=2,pp=2,buffers=distopt,pattern=" + piped}) {
    Outcome o = RunFerry({"run", "--model", "nemotron-h-8b", "--scale", "1/64", "--src", src,
                          "--dst", "megatron:tp=1", "--transport", "tcp", "--verify", "--set",
                          "executor.direct_intra_node=false"},
                         60);
    ExpectVerified(o, 1);
  }
}

// planner.same_rank=transport on colocated ranks: every byte a rank holds for itself travels as a
// message to itself over transport.same_rank (tcp loopback, then the in-process local transport),
// verified; the default keeps them local copies and the transports send nothing.
TEST(RunIntegrationTest, SameRankBytesThroughTheSameRankTransport) {
  const std::vector<std::string> refit = {"run", "--model", "llama-3.1-8b", "--scale", "1/64",
                                          "--src", "megatron:tp=2", "--dst", "vllm:tp=2",
                                          "--colocated", "--transport", "tcp", "--verify",
                                          "--iterations", "1", "--warmup", "0"};
  for (const char* same_rank : {"tcp", "local"}) {
    std::vector<std::string> args = refit;
    args.insert(args.end(), {"--set", std::string("transport.same_rank=") + same_rank, "--set",
                             "planner.same_rank=transport"});
    Outcome o = RunFerry(args, 60);
    ExpectVerified(o, 1);
    EXPECT_NE(o.output.find("2 messages"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("sent by transports                         3.76 MiB"), std::string::npos)
        << o.output;
  }
  Outcome copied = RunFerry(refit, 60);
  ExpectVerified(copied, 1);
  EXPECT_NE(copied.output.find("0 messages"), std::string::npos) << copied.output;
}

TEST(RunIntegrationTest, UnevenStridedFusedLayoutFilesOverTcp) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml",
                        "--dst-layout", "tests/tools/cli/testdata/uneven_dst.yaml", "--transport",
                        "tcp", "--strategy", "both", "--verify", "--iterations", "2", "--set",
                        "executor.direct_intra_node=false"},
                       60);
  ExpectVerified(o, 2);
  EXPECT_NE(o.output.find("5 local processes"), std::string::npos) << o.output;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `ferry plan --json` and the plan `ferry run` executes (--save-plan) are the same bytes for the
// same configuration: a YAML file, FERRY_* variables and --set all reach both. Two pretend nodes of
// four ranks, so that the plan has network messages, fan-out and chunking to differ in.
TEST(RunIntegrationTest, ThePlanFerryPlanPrintsIsThePlanFerryRunExecutes) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/planner.yaml") << "planner:\n  fanout_chunk_bytes: 128KiB\n";
  ::setenv("FERRY_PLANNER_RELAY_CHUNK_BYTES", "64KiB", 1);
  const std::vector<std::string> refit = {"--model", "llama-3.1-8b", "--scale", "1/64", "--src", "megatron:tp=2,pp=2",
                                          "--dst", "vllm:tp=2,dp=2", "--gpus-per-node", "4", "--config",
                                          dir + "/planner.yaml", "--set", "planner.network_chunk_bytes=256KiB"};
  std::vector<std::string> plan = {"plan"};
  plan.insert(plan.end(), refit.begin(), refit.end());
  plan.insert(plan.end(), {"--json", dir + "/planned.json"});
  std::vector<std::string> run = {"run"};
  run.insert(run.end(), refit.begin(), refit.end());
  run.insert(run.end(), {"--transport", "tcp", "--verify", "--save-plan", dir + "/executed.json"});
  const Outcome planned = RunFerry(plan, 60);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const Outcome executed = RunFerry(run, 90);
  ::unsetenv("FERRY_PLANNER_RELAY_CHUNK_BYTES");
  ExpectVerified(executed, 1);
  const std::string a = ReadText(dir + "/planned.json"), b = ReadText(dir + "/executed.json");
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "ferry plan wrote " << a.size() << " bytes, ferry run executed " << b.size();
  // And the configuration mattered: the default chunk sizes give another plan.
  plan.resize(plan.size() - 6);
  plan.insert(plan.end(), {"--json", dir + "/default.json"});
  ASSERT_EQ(RunFerry(plan, 60).exit_code, 0);
  EXPECT_NE(ReadText(dir + "/default.json"), a);
}

// The smallest staging budget a plan runs in, as `ferry plan --json` states it (staging_needed:
// core/plan/staging_layout.h).
int64_t SmallestStagingBudget(const std::string& plan_json) {
  return nlohmann::json::parse(ReadText(plan_json)).at("staging_needed").get<int64_t>();
}

// Runs `refit` (ferry's refit arguments) with every message staged (direct reads off), the staging
// budget `ferry plan` states the plan needs and one message in flight per rank: it must still
// complete verified, so no op waits for staging space or a window slot that only another waiting
// op could free. One byte less is refused before any op runs, naming the need.
void ExpectRunsInTheSmallestStagingBudget(const std::vector<std::string>& refit, const std::string& name,
                                          const std::string& strategy = "reshard") {
  const std::string plan_json = std::string(std::getenv("TEST_TMPDIR")) + "/" + name + ".json";
  std::vector<std::string> plan = {"plan", "--strategy", strategy, "--json", plan_json};
  plan.insert(plan.end(), refit.begin(), refit.end());
  ASSERT_EQ(RunFerry(plan, 60).exit_code, 0);
  const int64_t budget = SmallestStagingBudget(plan_json);
  ASSERT_GT(budget, 0);
  auto run = [&](int64_t bytes) {
    std::vector<std::string> args = {"run", "--strategy", strategy, "--transport", "tcp", "--verify",
                                     "--iterations", "2", "--warmup", "0", "--set",
                                     "executor.direct_intra_node=false", "--set", "executor.max_in_flight=1",
                                     "--set", "executor.staging_budget=" + std::to_string(bytes)};
    args.insert(args.end(), refit.begin(), refit.end());
    return RunFerry(args, 90);
  };
  const Outcome fits = run(budget);
  ExpectVerified(fits, 1);
  EXPECT_NE(fits.output.find("peak staging/rank"), std::string::npos) << fits.output;
  const Outcome short_by_one = run(budget - 1);
  EXPECT_EQ(short_by_one.exit_code, 1) << short_by_one.output;
  EXPECT_NE(short_by_one.output.find(" = " + std::to_string(budget - 1) + " bytes)"), std::string::npos)
      << short_by_one.output;
  EXPECT_NE(short_by_one.output.find(" = " + std::to_string(budget) + " bytes of staging"), std::string::npos)
      << short_by_one.output;
}

TEST(RunIntegrationTest, ReshardCompletesWithTheSmallestStagingBudgetAndAWindowOfOne) {
  ExpectRunsInTheSmallestStagingBudget({"--model", "qwen3-30b-a3b", "--scale", "1/64", "--src", "megatron:tp=2,ep=2",
                                        "--dst", "vllm:tp=2,dp=2"},
                                       "qwen3");
}

// The baseline cycles two bucket buffers per rank (planner/gather_broadcast.cc), so it too runs in
// the staging its plan states.
TEST(RunIntegrationTest, GatherBroadcastCompletesWithTheSmallestStagingBudgetAndAWindowOfOne) {
  ExpectRunsInTheSmallestStagingBudget({"--model", "qwen3-30b-a3b", "--scale", "1/64", "--src", "megatron:tp=2,ep=2",
                                        "--dst", "vllm:tp=2,dp=2"},
                                       "qwen3_gb", "gather-broadcast");
}

// Colocated, every rank sends and receives: a receive waiting for its sender must not take the
// window slot that rank's own sends need, or two ranks each wait for the other's send (the run
// hung here while receives counted against executor.max_in_flight).
TEST(RunIntegrationTest, ColocatedRanksCompleteWithTheSmallestStagingBudgetAndAWindowOfOne) {
  const std::vector<std::string> colocated = {"--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
                                              "megatron:tp=2,ep=2", "--dst", "vllm:tp=2,dp=2", "--colocated"};
  ExpectRunsInTheSmallestStagingBudget(colocated, "qwen3_colocated");
  ExpectRunsInTheSmallestStagingBudget(colocated, "qwen3_colocated_gb", "gather-broadcast");
}

// Block-scaled fp8 destinations keep each matrix's bf16 rows in a slot until it is quantized, over
// several receives: the case where slots outlive the op that took them.
TEST(RunIntegrationTest, BlockQuantizingCompletesWithTheSmallestStagingBudgetAndAWindowOfOne) {
  ExpectRunsInTheSmallestStagingBudget({"--src-layout", "tests/tools/cli/testdata/fp8_block_src.yaml", "--dst-layout",
                                        "tests/tools/cli/testdata/fp8_block_dst.yaml"},
                                       "fp8_block");
}

// The rest of the line that starts with `label` (trimmed), or "" when there is none.
std::string RowValue(const std::string& output, const std::string& label) {
  const size_t at = output.find(label);
  if (at == std::string::npos) return "";
  std::string rest = output.substr(at + label.size(), output.find('\n', at) - at - label.size());
  rest.erase(0, rest.find_first_not_of(' '));
  return rest;
}

// "12.3 ms" or "1.234 s" (FormatSeconds without microseconds) in seconds; -1 when it is neither.
double ParseSeconds(const std::string& text) {
  double value = 0;
  char unit[4] = {};
  if (std::sscanf(text.c_str(), "%lf %3s", &value, unit) != 2) return -1;
  if (std::string(unit) == "ms") return value * 1e-3;
  return std::string(unit) == "s" ? value : -1;
}

// The `index`th field (from 0) of the first row of a --results file; "" when it has none.
std::string CsvField(const std::string& csv, int index) {
  std::ifstream in(csv);
  std::string row, field;
  std::getline(in, row);
  std::stringstream fields(row);
  for (int i = 0; i <= index; ++i) {
    if (!std::getline(fields, field, ',')) return "";
  }
  return field;
}

// Every refit starts at one instant the ranks agree on and is timed from it: the start spread
// (how late the last rank started after the instant) is never negative, in the report and in
// --results, and the refit lasts at least as long as its slowest rank's own run.
TEST(RunIntegrationTest, RefitsStartAtOneInstantAndAreTimedFromIt) {
  const std::string csv = std::string(std::getenv("TEST_TMPDIR")) + "/instant.csv";
  Outcome o = RunFerry({"run", "--model", "llama-3.1-8b", "--scale", "1/64", "--src", "megatron:tp=2,pp=2", "--dst",
                        "vllm:tp=4", "--transport", "tcp", "--strategy", "reshard", "--verify", "--warmup", "2",
                        "--iterations", "1", "--results", csv},
                       120);
  ExpectVerified(o, 1);
  const double spread = ParseSeconds(RowValue(o.output, "ranks' start spread (mean)"));
  EXPECT_GE(spread, 0) << o.output;
  const std::string spread_column = CsvField(csv, 10);
  ASSERT_FALSE(spread_column.empty()) << csv;
  EXPECT_GE(std::stod(spread_column), 0);
  // One measured refit: its time and its slowest rank's run, both printed to 0.1 ms.
  const double refit = ParseSeconds(RowValue(o.output, "refit time (mean)"));
  const double slowest = ParseSeconds(RowValue(o.output, "slowest rank's own run"));
  ASSERT_GT(slowest, 0) << o.output;
  EXPECT_GE(refit, slowest) << o.output;
}

// One plan over two transports: two pretend nodes of four ranks, tcp between them and ucx inside.
// `ferry run` says what each carried, and tcp's bytes are the plan's network bytes (`ferry plan`).
TEST(RunIntegrationTest, MixedTransportsReportWhatEachCarried) {
  const std::vector<std::string> refit = {"--model", "llama-3.1-8b", "--scale", "1/64", "--src", "megatron:tp=2,pp=2",
                                          "--dst", "vllm:tp=2,dp=2", "--gpus-per-node", "4"};
  std::vector<std::string> run = {"run"};
  run.insert(run.end(), refit.begin(), refit.end());
  run.insert(run.end(), {"--transport", "tcp", "--set", "transport.intra_node=ucx", "--verify", "--iterations",
                         "1", "--warmup", "0"});
  const Outcome executed = RunFerry(run, 90);
  ExpectVerified(executed, 1);
  std::vector<std::string> plan = {"plan"};
  plan.insert(plan.end(), refit.begin(), refit.end());
  const Outcome planned = RunFerry(plan, 60);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const std::string network = RowValue(planned.output, "bytes network");
  ASSERT_FALSE(network.empty()) << planned.output;
  const std::string tcp = RowValue(executed.output, "received over tcp");
  ASSERT_FALSE(tcp.empty()) << executed.output;
  EXPECT_EQ(network.substr(0, network.find("  ")), tcp.substr(0, tcp.find(" in "))) << executed.output;
  EXPECT_NE(RowValue(executed.output, "received over ucx").find("msgs"), std::string::npos) << executed.output;
}

TEST(RunIntegrationTest, TwoHundredRefitsInOneCommunicatorLeakNothing) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml",
                        "--dst-layout", "tests/tools/cli/testdata/uneven_dst.yaml", "--transport",
                        "tcp", "--iterations", "200", "--warmup", "5", "--leak-check"},
                       90);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("leak check over 200 refits"), std::string::npos) << o.output;
}

TEST(RunIntegrationTest, UnknownTransportIsAClearErrorBeforeAnyProcessStarts) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml",
                        "--dst-layout", "tests/tools/cli/testdata/uneven_dst.yaml", "--transport",
                        "carrier-pigeon"},
                       30);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("--transport carrier-pigeon: unknown"), std::string::npos) << o.output;
}

// --memory cuda: without a GPU a clear error before any process starts; with one, a refit of CUDA
// buffers verified by checksums on the GPU.
TEST(RunIntegrationTest, CudaMemoryRunsVerifiedOrSaysThereIsNoGpu) {
  Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml",
                        "--dst-layout", "tests/tools/cli/testdata/uneven_dst.yaml", "--transport",
                        "tcp", "--memory", "cuda", "--verify"},
                       60);
  if (o.exit_code == 0) {
    EXPECT_NE(o.output.find("cuda memory"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("bit-exact, by fragment checksums on the GPU"), std::string::npos) << o.output;
  } else {
    EXPECT_EQ(o.exit_code, 1) << o.output;
    EXPECT_NE(o.output.find("--memory cuda: no CUDA device is visible"), std::string::npos) << o.output;
  }
}

// --verify catches a wrong byte and names where it is: FERRY_INJECT_FAULT flips one bit of rank
// 3's first destination fragment (tensor w) after the refits. Host memory always; CUDA memory (the
// check by GPU checksums) where a GPU is visible.
TEST(RunIntegrationTest, VerifyNamesTheRankAndTensorOfAWrongByte) {
  ::setenv("FERRY_INJECT_FAULT", "3:corrupt:verify", 1);
  for (const std::string memory : {"host", "cuda"}) {
    Outcome o = RunFerry({"run", "--src-layout", "tests/tools/cli/testdata/uneven_src.yaml", "--dst-layout",
                          "tests/tools/cli/testdata/uneven_dst.yaml", "--transport", "tcp", "--memory", memory,
                          "--verify", "--iterations", "1", "--warmup", "0"},
                         60);
    if (memory == "cuda" && o.output.find("no CUDA device is visible") != std::string::npos) {
      std::printf("SKIPPED the CUDA case: no CUDA device on this machine\n");
      continue;
    }
    EXPECT_EQ(o.exit_code, 1) << memory << ": " << o.output;
    EXPECT_NE(o.output.find("rank 3 failed verification"), std::string::npos) << memory << ": " << o.output;
    EXPECT_NE(o.output.find("tensor 'w' element [0, 1]"), std::string::npos) << memory << ": " << o.output;
    if (memory == "cuda") {
      EXPECT_NE(o.output.find("tensor 'w' fragment"), std::string::npos) << o.output;
    }
  }
  ::unsetenv("FERRY_INJECT_FAULT");
}

TEST(RunIntegrationTest, TimeoutKillsEveryRankAndSaysSo) {
  // 300 ms cannot even plan this refit: the launcher must kill all ranks and report it.
  Outcome o = RunFerry({"run", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
                        "megatron:tp=2,ep=2", "--dst", "vllm:tp=2,dp=2", "--transport", "tcp",
                        "--timeout", "0.3"},
                       30);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("killed"), std::string::npos) << o.output;
}

}  // namespace
