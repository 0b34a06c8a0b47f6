// `ferry run` into vLLM engines with pipeline parallelism: the real binary refits Megatron
// trainers into `vllm:...,pp=2` destinations in host memory over tcp (direct reads off) and
// verifies every destination byte with both strategies. Each case runs under a deadline and kills
// the process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

Outcome RunOverTcp(const std::string& model, const std::string& src, const std::string& dst) {
  return RunFerry({"run", "--model", model, "--scale", "1/64", "--src", src, "--dst", dst,
                   "--memory", "host", "--transport", "tcp", "--strategy", "both", "--verify",
                   "--iterations", "1", "--warmup", "0", "--set",
                   "executor.direct_intra_node=false"},
                  120);
}

void ExpectBothVerified(const Outcome& o) {
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("transports in use: local, tcp"), std::string::npos) << o.output;
  EXPECT_EQ(Count(o.output, "bit-exact"), 2) << o.output;  // reshard, gather-broadcast
}

// Llama: PP rank 0 (ranks 4, 5) holds embed_tokens and layers 0..15, PP rank 1 (ranks 6, 7)
// layers 16..31, the final norm and lm_head.
TEST(RunVllmPipelineTest, MegatronToVllmTp2Pp2VerifiedOverTcp) {
  Outcome o = RunOverTcp("llama-3.1-8b", "megatron:tp=2,pp=2", "vllm:tp=2,pp=2");
  ExpectBothVerified(o);
  EXPECT_NE(o.output.find("-> vllm:tp=2,pp=2,dp=1,ep=1"), std::string::npos) << o.output;
}

// Qwen3-MoE: an uneven explicit partition, embed_tokens, norm and lm_head on both PP ranks, each
// stage's experts over its own TP group (ep = tp*dp = 2).
TEST(RunVllmPipelineTest, MoeWithPartitionAndExpertParallelVerifiedOverTcp) {
  ExpectBothVerified(
      RunOverTcp("qwen3-30b-a3b", "megatron:tp=2,ep=2", "vllm:tp=2,pp=2,partition=20.28,ep=2"));
}

// DeepSeek-V3 with its MTP layer: vLLM builds the drafter on the last PP rank (ranks 10, 11),
// with its own copy of the embedding there beside the first PP rank's (tools/models/vllm_layout.h).
TEST(RunVllmPipelineTest, MtpDrafterOnTheLastPipelineRankVerifiedOverTcp) {
  Outcome o = RunOverTcp("deepseek-v3", "megatron:tp=2,pp=2,first=31,ep=2,mtp=1",
                         "vllm:tp=2,pp=2,mtp=1");
  ExpectBothVerified(o);
  EXPECT_NE(o.output.find("-> vllm:tp=2,pp=2,dp=1,ep=1,mtp=1"), std::string::npos) << o.output;
}

// Qwen3-MoE's 48 MoE layers over pp 2 with EPLB: 128 + 2 physical experts on each stage's two EP
// ranks, each PP rank's own map (24 rows): PP rank 0 reversed (physical p holds 127 - p, then
// 5, 6), PP rank 1 the initial arrangement shifted by one (p + 1 mod 128, then 0, 1).
TEST(RunVllmPipelineTest, EplbMapPerPipelineRankVerifiedOverTcp) {
  auto row = [](int stage) {
    std::string r = "[";
    for (int p = 0; p < 128; ++p) r += std::to_string(stage == 0 ? 127 - p : (p + 1) % 128) + ", ";
    return r + (stage == 0 ? "5, 6]" : "0, 1]");
  };
  std::string text = "{\"pp_ranks\": [";
  for (int stage = 0; stage < 2; ++stage) {
    text += stage == 0 ? "[" : ", [";
    for (int l = 0; l < 24; ++l) text += (l == 0 ? "" : ", ") + row(stage);
    text += "]";
  }
  text += "]}";
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/pp_eplb_map.json";
  std::ofstream(path) << text;
  ExpectBothVerified(RunOverTcp("qwen3-30b-a3b", "megatron:tp=2,ep=2",
                                "vllm:tp=2,pp=2,ep=2,redundant=2,eplb_map=" + path));
}

}  // namespace
