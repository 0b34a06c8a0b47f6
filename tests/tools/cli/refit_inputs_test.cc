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

// --dst-dtype: the weights (>= 2-dim bf16 tensors) change dtype, 1-dim tensors keep theirs, and
// the buffers holding converted tensors shrink by the element sizes' ratio.
TEST(RefitInputsTest, DestinationDTypeConvertsTheWeightsOnly) {
  RefitSourceArgs args;
  args.model = "qwen3-30b-a3b";
  args.scale = 1.0 / 64;
  args.source_spec = "megatron:tp=2,ep=2";
  args.destination_spec = "vllm:tp=2";
  Result<RefitInputs> plain = LoadRefitInputs(args);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  args.destination_dtype = "fp8_e4m3";
  Result<RefitInputs> in = LoadRefitInputs(args);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_TRUE(in->weights_converted);
  EXPECT_NE(in->description.find("(weights as fp8_e4m3)"), std::string::npos) << in->description;
  int converted = 0, kept = 0;
  for (size_t t = 0; t < in->destination.tensors.size(); ++t) {
    const TensorSpec& before = plain->destination.tensors[t];
    const TensorSpec& after = in->destination.tensors[t];
    if (before.shape.size() >= 2 && before.dtype == DType::kBF16) {
      EXPECT_EQ(after.dtype, DType::kFP8E4M3) << after.name;
      ++converted;
    } else {
      EXPECT_EQ(after.dtype, before.dtype) << after.name;
      ++kept;
    }
  }
  EXPECT_GT(converted, 0);
  EXPECT_GT(kept, 0);  // the norms
  int64_t bytes_before = 0, bytes_after = 0;
  for (const BufferSpec& b : plain->destination.buffers) bytes_before += b.bytes;
  for (const BufferSpec& b : in->destination.buffers) bytes_after += b.bytes;
  EXPECT_LT(bytes_after, bytes_before * 6 / 10);  // mostly weights: about half
  args.destination_dtype = "int8";
  EXPECT_NE(LoadRefitInputs(args).status().message().find("--dst-dtype int8"), std::string::npos);
}

// A weight sharing a buffer with a tensor that keeps its dtype keeps its own (the buffer's bytes
// could not be rescaled): uneven_dst.yaml fuses w (bf16) with b (fp32) on ranks 2 and 3.
TEST(RefitInputsTest, DestinationDTypeLeavesMixedBuffersAlone) {
  RefitSourceArgs args;
  args.source_layout_file = "tests/tools/cli/testdata/uneven_src.yaml";
  args.destination_layout_file = "tests/tools/cli/testdata/uneven_dst.yaml";
  args.destination_dtype = "fp8_e4m3";
  Result<RefitInputs> in = LoadRefitInputs(args);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_FALSE(in->weights_converted);
  EXPECT_EQ(in->destination.tensors[0].dtype, DType::kBF16);
}

// vLLM's DeepGEMM linear kernel (vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py)
// runs bf16 models only: UE8M0 scales chosen for bf16 weights are refused for weights made fp16.
TEST(RefitInputsTest, DestinationDTypeRefusedWithUe8m0Scales) {
  RefitSourceArgs args;
  args.model = "qwen3-30b-a3b";
  args.scale = 1.0 / 2;
  args.source_spec = "megatron:tp=2,ep=2";
  args.destination_spec = "vllm:tp=2,ep=2,quant=fp8_block,scale_fmt=ue8m0";
  Result<RefitInputs> bf16 = LoadRefitInputs(args);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  args.destination_dtype = "fp16";
  Result<RefitInputs> fp16 = LoadRefitInputs(args);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("--dst-dtype fp16 with UE8M0 block scales"),
            std::string::npos)
      << fp16.status().ToString();
  // The same for the scales packed as on SM100.
  args.destination_spec = "vllm:tp=2,ep=2,quant=fp8_block,scale_fmt=ue8m0_packed";
  Result<RefitInputs> packed = LoadRefitInputs(args);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("--dst-dtype fp16 with UE8M0 block scales"), std::string::npos)
      << packed.status().ToString();
  args.destination_spec = "vllm:tp=2,ep=2,quant=fp8_block";
  EXPECT_TRUE(LoadRefitInputs(args).ok());
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
  // --colocated moves a preset's destination ranks; layout files fix their own, so it would be
  // silently ignored.
  files.source_layout_file = "tests/tools/cli/testdata/uneven_src.yaml";
  files.destination_layout_file = "tests/tools/cli/testdata/uneven_dst.yaml";
  ASSERT_TRUE(LoadRefitInputs(files).ok());
  files.colocated = true;
  EXPECT_NE(LoadRefitInputs(files).status().message().find("--colocated places a preset's destination"),
            std::string::npos)
      << LoadRefitInputs(files).status().ToString();
}

}  // namespace
}  // namespace ferry::cli
