// Tests for tools/models/pipeline_stages: which layer lands on which Megatron pipeline stage, and
// the configurations Megatron rejects. Expected stages are worked by hand from
// megatron/core/transformer/transformer_block.py get_num_layers_to_build and the uneven-PP checks
// of megatron/core/transformer/transformer_config.py __post_init__.
#include "tools/models/pipeline_stages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

// Layers per stage of a stage_of vector.
std::vector<int> Counts(const std::vector<int>& stage_of, int pp) {
  std::vector<int> counts(pp, 0);
  for (int s : stage_of) ++counts[s];
  return counts;
}

TEST(PipelineStagesTest, EvenSplitOrRejected) {
  EXPECT_EQ(MegatronStageOfLayer(8, 4, 0, 0).value(), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  Result<std::vector<int>> uneven = MegatronStageOfLayer(61, 16, 0, 0);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("num_layers=61"), std::string::npos);
  EXPECT_NE(uneven.status().message().find("pipeline_model_parallel_size=16"), std::string::npos);
  EXPECT_NE(uneven.status().message().find("first=N,last=M"), std::string::npos);
}

TEST(PipelineStagesTest, FirstAndLastStages) {
  // DeepSeek-V3: 61 = 3 + 14 * 4 + 2.
  std::vector<int> ds = MegatronStageOfLayer(61, 16, 3, 2).value();
  std::vector<int> expected(16, 4);
  expected[0] = 3;
  expected[15] = 2;
  EXPECT_EQ(Counts(ds, 16), expected);
  EXPECT_EQ(ds[2], 0);
  EXPECT_EQ(ds[3], 1);
  EXPECT_EQ(ds[58], 14);
  EXPECT_EQ(ds[59], 15);
  // Only the first given: 7 = 1 + 3 * 2.
  EXPECT_EQ(MegatronStageOfLayer(7, 4, 1, 0).value(), (std::vector<int>{0, 1, 1, 2, 2, 3, 3}));
  // Only the last given, pp 2: no middle stage.
  EXPECT_EQ(MegatronStageOfLayer(5, 2, 0, 2).value(), (std::vector<int>{0, 0, 0, 1, 1}));
}

TEST(PipelineStagesTest, RejectsWhatMegatronRejects) {
  // 61 - 3 - 3 = 55 over 14 middle stages.
  Result<std::vector<int>> middle = MegatronStageOfLayer(61, 16, 3, 3);
  ASSERT_FALSE(middle.ok());
  EXPECT_NE(middle.status().message().find("number of layers at middle stage: 55 must be divisible"),
            std::string::npos);
  // pp 2 with first and last: no middle stage, but 61 - 30 - 30 = 1 layer left.
  Result<std::vector<int>> mismatch = MegatronStageOfLayer(61, 2, 30, 30);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find(
                "Mismatch: 1 middle layers remaining but 0 middle PP stages available."),
            std::string::npos);
  EXPECT_FALSE(MegatronStageOfLayer(8, 4, 6, 6).ok());  // more than the layers
  EXPECT_FALSE(MegatronStageOfLayer(8, 1, 4, 4).ok());
}

TEST(PipelineStagesTest, SpecAndLayout) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  EXPECT_FALSE(BuildFrameworkLayout(ds, Spec("megatron:pp=16,ep=16")).ok());
  FrameworkSpec spec = Spec("megatron:pp=16,ep=16,first=3,last=2");
  EXPECT_EQ(spec.ToString(), "megatron:tp=1,pp=16,first=3,last=2,ep=16,cp=1");
  Layout l = BuildAsSpecified(ds, "megatron:pp=16,ep=16,first=3,last=2");
  // dp 16 a stage: stage 1 starts at rank 16 with global layer 3 as its local layer 0.
  EXPECT_GE(l.FindBuffer(16, "decoder.layers.0.self_attention.linear_proj.weight"), 0);
  EXPECT_EQ(l.FindBuffer(0, "decoder.layers.3.self_attention.linear_proj.weight"), -1);
  EXPECT_GE(l.FindBuffer(15 * 16, "decoder.layers.1.self_attention.linear_proj.weight"), 0);
  EXPECT_EQ(l.FindBuffer(15 * 16, "decoder.layers.2.self_attention.linear_proj.weight"), -1);
}

}  // namespace
}  // namespace ferry::models
