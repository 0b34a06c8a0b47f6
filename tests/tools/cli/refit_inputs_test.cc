// Tests for LoadRefitInputs: preset layouts with their rank count, and errors naming the argument.
#include "tools/cli/refit_inputs.h"

#include <gtest/gtest.h>

namespace ferry::cli {
namespace {

TEST(RefitInputsTest, PresetModeBuildsBothLayoutsAndCountsRanks) {
  RefitSourceArgs args;
  args.model = "llama-3.1-8b";
  args.scale = 1.0 / 64;
  args.source_spec = "megatron:tp=2,pp=2";
  args.destination_spec = "vllm:tp=2,dp=2";
  Result<RefitInputs> in = LoadRefitInputs(args);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->ranks, 8);  // 4 source ranks, then 4 destination ranks
  EXPECT_EQ(in->topology.NumRanks(), 8);
  EXPECT_EQ(in->source.Ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(in->destination.Ranks(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(in->description.find("-> vllm:tp=2,dp=2"), std::string::npos) << in->description;
  args.colocated = true;
  Result<RefitInputs> colocated = LoadRefitInputs(args);
  ASSERT_TRUE(colocated.ok());
  EXPECT_EQ(colocated->ranks, 4);
}

TEST(RefitInputsTest, ErrorsNameTheArgument) {
  RefitSourceArgs preset;
  preset.model = "llama-3.1-8b";
  preset.source_spec = "megatron:tp=2";
  EXPECT_NE(LoadRefitInputs(preset).status().message().find("--model needs both --src and --dst"),
            std::string::npos);
  preset.destination_spec = "vllm:tq=2";
  EXPECT_NE(LoadRefitInputs(preset).status().message().find("--dst vllm:tq=2"), std::string::npos);
  preset.destination_spec = "vllm:tp=2";
  preset.gpus_per_node = 0;
  EXPECT_NE(LoadRefitInputs(preset).status().message().find("--gpus-per-node must be positive"),
            std::string::npos);
  RefitSourceArgs files;
  files.source_layout_file = "/nonexistent/src.yaml";
  EXPECT_NE(LoadRefitInputs(files).status().message().find("must be given together"),
            std::string::npos);
  files.destination_layout_file = "/nonexistent/dst.yaml";
  EXPECT_NE(LoadRefitInputs(files).status().message().find("--src-layout /nonexistent/src.yaml"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::cli
