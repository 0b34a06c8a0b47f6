// `ferry run` of a model read from its Hugging Face config.json with q/k/v biases: Qwen2.5-7B
// (tests/tools/models/testdata/hf/Qwen2.5-7B) scaled 1/64, a Megatron TP2 trainer's interleaved
// linear_qkv.bias into vLLM TP1 x DP2 engines' qkv_proj.bias, verified bit-exact by the real
// binary in host memory over tcp. The case runs under a deadline and kills the process group.
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

TEST(RunQwen2Test, MegatronTp2ToVllmDp2WithQkvBiasesVerifiedOverTcp) {
  Outcome o = RunFerry({"run", "--model", "tests/tools/models/testdata/hf/Qwen2.5-7B", "--scale",
                        "1/64", "--src", "megatron:tp=2", "--dst", "vllm:tp=1,dp=2", "--memory",
                        "host", "--transport", "tcp", "--strategy", "both", "--verify",
                        "--iterations", "1", "--warmup", "0", "--set",
                        "executor.direct_intra_node=false"},
                       120);
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_NE(o.output.find("Qwen2.5-7B@1/64"), std::string::npos) << o.output;
  EXPECT_EQ(Count(o.output, "bit-exact"), 2) << o.output;  // reshard, gather-broadcast
}

}  // namespace
