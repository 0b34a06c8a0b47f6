// Tests of `ferry layout --explain` through its CLI11 subcommand: one tensor's fragments rank by
// rank with the rules and upstream files behind them, and an unknown tensor refused by name.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/tools/cli/run_cli_testutil.h"
#include "tools/cli/commands.h"
#include "tools/models/framework_spec.h"

namespace ferry::cli {
namespace {

int RunCli(std::vector<std::string> argv, std::string* out) {
  ::testing::internal::CaptureStdout();
  const int code = RunSubcommand(AddLayoutCommand, std::move(argv));
  *out = ::testing::internal::GetCapturedStdout();
  return code;
}

// --help lists every key a framework spec takes, vLLM's pp and engines included, as the parser
// accepts them.
TEST(CmdLayoutTest, HelpListsEveryFrameworkSpecKey) {
  std::string out;
  RunCli({"layout", "--help"}, &out);
  EXPECT_NE(out.find(models::FrameworkSpecKeys()), std::string::npos) << out;
  EXPECT_NE(out.find("vllm:tp=N,pp=N"), std::string::npos) << out;
  EXPECT_EQ(out.find("vllm:tp=,dp=,ep="), std::string::npos) << out;
}

// Options a mode would ignore are refused by name: --validate builds nothing from --model, and
// --explain saves nothing.
TEST(CmdLayoutTest, OptionsAModeWouldIgnoreAreRefused) {
  std::string out;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"layout", "--validate", "layout.yaml", "--model", "llama-3.1-8b"}, "--model excludes --validate"},
      {{"layout", "--list-models", "--framework", "vllm:tp=2"}, "--framework excludes --list-models"},
      {{"layout", "--model", "llama-3.1-8b", "--framework", "vllm:tp=2", "--explain",
        "model.embed_tokens.weight", "--save", "out.yaml"},
       "--save excludes --explain"},
  };
  for (const auto& [argv, expected] : cases) {
    ::testing::internal::CaptureStderr();
    EXPECT_NE(RunCli(argv, &out), 0);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(expected), std::string::npos) << err;
    EXPECT_EQ(out.find("valid"), std::string::npos) << out;
  }
}

TEST(CmdLayoutTest, ExplainsOneTensor) {
  // Llama-3.1-8B at 1/64: vocabulary 2016 rows (128256/64 rounded up to 16), padded to 2048 by
  // vLLM's 64 and split over tp 2: rank 1 holds rows 1024..2015 of its 1024-row buffer.
  std::string out;
  ASSERT_EQ(RunCli({"layout", "--model", "llama-3.1-8b", "--scale", "1/64", "--framework",
                    "vllm:tp=2", "--explain", "model.embed_tokens.weight"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 1  model.embed_tokens.weight  [1024:2016, 0:64)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("vllm/model_executor/layers/vocab_parallel_embedding.py"), std::string::npos);
  // An expert named by its checkpoint name, held as a stack by default.
  ASSERT_EQ(RunCli({"layout", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--framework",
                    "megatron:tp=2,pp=2,ep=4,etp=1,experts=grouped", "--explain",
                    "model.layers.30.mlp.experts.5.up_proj.weight"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 4  decoder.layers.6.mlp.experts.linear_fc1.weight5"), std::string::npos)
      << out;
  EXPECT_NE(out.find("megatron/core/transformer/transformer_block.py"), std::string::npos);
  // Megatron's layout string over pp 2: stage i is chunk i / 2 of rank i % 2, so layer 17 is the
  // second layer of stage 2 ("t*8" after "Et*8|t*8|"): chunk 1 of rank 0.
  ASSERT_EQ(RunCli({"layout", "--model", "llama-3.1-8b", "--scale", "1/64", "--framework",
                    "megatron:pp=2,layout=Et*8|t*8|t*8|t*8L", "--explain",
                    "model.layers.17.self_attn.o_proj.weight"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 0  model1.decoder.layers.1.self_attention.linear_proj.weight"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("megatron/core/transformer/pipeline_parallel_layer_layout.py"),
            std::string::npos);
  // The distributed optimizer's buffer: layer 31's down_proj, last in named_parameters(), first
  // in the buffer.
  ASSERT_EQ(RunCli({"layout", "--model", "llama-3.1-8b", "--scale", "1/64", "--framework",
                    "megatron:buffers=distopt", "--explain",
                    "model.layers.31.mlp.down_proj.weight"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 0  buffers.0.param_data"), std::string::npos) << out;
  EXPECT_NE(out.find("megatron/core/optimizer/distrib_optimizer.py"), std::string::npos);
  ASSERT_EQ(RunCli({"layout", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--framework",
                    "vllm:tp=2,ep=2,redundant=2", "--explain",
                    "model.layers.0.mlp.experts.0.up_proj.weight"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 1  model.layers.0.mlp.experts.routed_experts.w13_weight"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("vllm/distributed/eplb/eplb_state.py"), std::string::npos);
  EXPECT_EQ(RunCli({"layout", "--model", "llama-3.1-8b", "--scale", "1/64", "--framework",
                    "vllm:tp=2", "--explain", "no.such.tensor"},
                   &out),
            1);
}

// --model takes a Hugging Face config.json's directory: Llama-3.2-1B, not a preset, ties its
// embeddings, so vLLM holds no lm_head: 1 embedding + 16 layers x 9 + the final norm = 146.
TEST(CmdLayoutTest, BuildsAModelFromItsHuggingFaceConfig) {
  std::string out;
  ASSERT_EQ(RunCli({"layout", "--model", "tests/tools/models/testdata/hf/Llama-3.2-1B",
                    "--framework", "vllm:tp=2", "--check"},
                   &out),
            0);
  EXPECT_NE(out.find("model: Llama-3.2-1B\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tensors: 146\n"), std::string::npos) << out;
  EXPECT_NE(out.find("validation: ok"), std::string::npos) << out;
}

TEST(CmdLayoutTest, ExplainsAHybridModelsPipelineAndBuffers) {
  // nemotron-h-8b's pattern in four '|' segments of 13, 14, 15 and 10 layers over pp 2: layer 26
  // ends the second segment, chunk 0 of pipeline rank 1 (ranks 2 and 3 with tp 2), and sits in
  // that chunk's distributed-optimizer buffer.
  const std::string piped = "M-M-M-M*-M-M-|M-M-M*-M-M-M-M|-M*-M-M-M-M-M*-|M-M-M-M-M-";
  std::string out;
  ASSERT_EQ(RunCli({"layout", "--model", "nemotron-h-8b", "--scale", "1/64", "--framework",
                    "megatron:tp=2,pp=2,buffers=distopt,pattern=" + piped, "--explain",
                    "backbone.layers.26.mixer.A_log"},
                   &out),
            0);
  EXPECT_NE(out.find("rank 2  model0.buffers.0.param_data  [0:64)"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 3  model0.buffers.0.param_data  [64:128)"), std::string::npos) << out;
  EXPECT_NE(out.find("megatron/core/models/hybrid/hybrid_layer_allocation.py"), std::string::npos)
      << out;
  EXPECT_NE(out.find("own parameters"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry::cli
