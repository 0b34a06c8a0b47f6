// Tests for tools/models/hybrid_pipeline_stages: where Megatron's HybridModel puts each layer of a
// hybrid pattern, worked by hand from megatron/core/models/hybrid/hybrid_layer_allocation.py
// select_pipeline_segment (segment i of a '|' pattern is chunk i / pp of rank i % pp; without '|'
// an even or first/last split), and the configurations megatron/training/arguments.py
// validate_args rejects next to --hybrid-layer-pattern.
#include "tools/models/hybrid_pipeline_stages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

MegatronPipelineArgs Args(int pp, std::string pattern = "", int first = 0, int last = 0) {
  MegatronPipelineArgs a;
  a.pp = pp;
  a.first = first;
  a.last = last;
  a.hybrid_pattern = std::move(pattern);
  return a;
}

// (pp rank, chunk, local number) of each layer, flattened.
std::vector<int> Places(const std::string& model, const MegatronPipelineArgs& a) {
  Result<MegatronPipeline> p = MegatronHybridPipelineOf(model, a);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  std::vector<int> out;
  if (!p.ok()) return out;
  for (const LayerPlace& l : p->layers) {
    out.insert(out.end(), {l.pp_rank, l.vstage, l.local});
  }
  return out;
}

// Megatron's reason for rejecting `a`, or "" when it is accepted.
std::string Rejection(const std::string& model, const MegatronPipelineArgs& a) {
  Result<MegatronPipeline> p = MegatronHybridPipelineOf(model, a);
  return p.ok() ? "" : p.status().message();
}

bool Says(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

TEST(HybridPipelineStagesTest, PatternWithoutPipes) {
  // "M-M*-M" on pp=2: 3 layers a rank, each stage counting its layers from 0.
  EXPECT_EQ(Places("M-M*-M", Args(2)),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 0, 0, 2, 1, 0, 0, 1, 0, 1, 1, 0, 2}));
  // first=1 on pp=3: rank 0 one layer, the other five over two ranks do not divide.
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(3, "", 1)), "middle stage: 5"));
  // first=2,last=1 on pp=3: 2, 3, 1.
  EXPECT_EQ(Places("M-M*-M", Args(3, "", 2, 1)),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 2, 2, 0, 0}));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(4)),
                   "Number of layers (6) must be evenly divisible by "
                   "pipeline-model-parallel-size (4) when no pipe separators"));
}

TEST(HybridPipelineStagesTest, PatternWithPipes) {
  // Two segments on pp=2: "M-M*" on rank 0, "-M" on rank 1, uneven as the pattern says.
  EXPECT_EQ(Places("M-M*-M", Args(2, "M-M*|-M")),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 1, 0, 0, 1, 0, 1}));
  // Four segments on pp=2: two chunks a rank, segment 2 is chunk 1 of rank 0.
  EXPECT_EQ(Places("M-M*-M", Args(2, "M|-M|*-|M")),
            (std::vector<int>{0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0}));
  Result<MegatronPipeline> p = MegatronHybridPipelineOf("M-M*-M", Args(2, "M|-M|*-|M"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->vpp, 2);
  // An empty segment is a chunk with no layers.
  EXPECT_EQ(Places("M-M*-M", Args(2, "|M-M*-M")),
            (std::vector<int>{1, 0, 0, 1, 0, 1, 1, 0, 2, 1, 0, 3, 1, 0, 4, 1, 0, 5}));
}

TEST(HybridPipelineStagesTest, WhatMegatronRejects) {
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-|M*|-M")),
                   "Got 3 segments and 2 pipeline parallel size"));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-M|*-M", 3)),
                   "--decoder-first-pipeline-num-layers (first) should not be specified"));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-M|*-M", 0, 3)),
                   "--decoder-last-pipeline-num-layers (last) should not be specified"));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(1, "M-M|*-M")), "interleaved schedule"));
  MegatronPipelineArgs vstages = Args(2);
  vstages.vstages = 2;
  EXPECT_TRUE(Says(Rejection("M-M*-M", vstages), "--num-virtual-stages-per-pipeline-rank"));
  MegatronPipelineArgs vstage_layers = Args(2);
  vstage_layers.vstage_layers = 1;
  EXPECT_TRUE(Says(Rejection("M-M*-M", vstage_layers), "--num-layers-per-virtual-pipeline-stage"));
  MegatronPipelineArgs layout = Args(2);
  layout.layout = "Ettt|tttL";
  EXPECT_TRUE(Says(Rejection("M-M*-M", layout), "--pipeline-model-parallel-layout"));
  // Not Megatron's rejections: a pattern of other layers, and MTP layers of a hybrid model.
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-M|-M")), "is not the model's hybrid layer"));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-M|*-M/M")), "multi-token prediction"));
  EXPECT_TRUE(Says(Rejection("M-M*-M", Args(2, "M-M|*-M/M")), "nemotron_h_mtp.py"));
}

TEST(HybridPipelineStagesTest, NemotronHLayouts) {
  // nemotron-h-8b's 52 layers: pp=4 splits evenly (13 a rank), pp=8 needs first/last or '|'.
  ModelPreset p = Preset("nemotron-h-8b", 1.0 / 64);
  Layout l = BuildAsSpecified(p, "megatron:tp=2,pp=4");
  // Layer 13 (pattern 'M') is stage 1's decoder.layers.0.
  EXPECT_EQ(FragmentsIn(l, 2, "decoder.layers.0.mixer.A_log", "backbone.layers.13.mixer.A_log")
                .size(), 1u);
  Result<Layout> even = BuildFrameworkLayout(p, Spec("megatron:pp=8"));
  ASSERT_FALSE(even.ok());
  EXPECT_TRUE(Says(even.status().message(), "when no pipe separators"));
  BuildAsSpecified(p, "megatron:pp=8,first=6,last=4");
  // Two segments a rank over pp=2: chunk 1 of rank 0 is the third segment.
  const std::string pattern = p.config().hybrid_pattern;
  const std::string piped = pattern.substr(0, 13) + "|" + pattern.substr(13, 13) + "|" +
                            pattern.substr(26, 13) + "|" + pattern.substr(39);
  FrameworkSpec spec = Spec("megatron:tp=2,pp=2,buffers=distopt,pattern=" + piped);
  EXPECT_EQ(spec.ToString(),
            "megatron:tp=2,pp=2,ep=1,cp=1,buffers=distopt,pattern=" + piped);
  Layout v = BuildAsSpecified(p, spec.ToString());
  EXPECT_GE(v.FindBuffer(0, "model1.buffers.0.param_data"), 0);
  EXPECT_EQ(FragmentsIn(BuildAsSpecified(p, "megatron:tp=2,pp=2,pattern=" + piped), 0,
                        "model1.decoder.layers.0.mixer.A_log", "backbone.layers.26.mixer.A_log")
                .size(),
            1u);
  EXPECT_FALSE(ParseFrameworkSpec("megatron:pp=2,pattern=").ok());
  Result<Layout> gpt = BuildFrameworkLayout(Preset("llama-3.1-8b", 1.0 / 64),
                                            Spec("megatron:pp=2,pattern=M|M"));
  ASSERT_FALSE(gpt.ok());
  EXPECT_TRUE(Says(gpt.status().message(), "for hybrid (Mamba) models"));
}

}  // namespace
}  // namespace ferry::models
