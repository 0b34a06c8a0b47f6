// Tests for tools/models/pipeline_stages: which layer lands on which Megatron pipeline rank and
// model chunk, and the configurations Megatron rejects. Expected placements are worked by hand from
// megatron/core/transformer/transformer_block.py get_num_layers_to_build (its comment's 8-layer
// interleaving examples), megatron/core/transformer/transformer_layer.py
// get_transformer_layer_offset, the uneven-PP checks of
// megatron/core/transformer/transformer_config.py __post_init__ and the virtual-stage checks of
// megatron/training/arguments.py validate_args.
#include "tools/models/pipeline_stages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/pipeline_layout.h"

namespace ferry::models {
namespace {

MegatronPipelineArgs Args(int pp, int first = 0, int last = 0, int vstages = 0,
                          int vstage_layers = 0, std::string layout = "") {
  return {pp, first, last, vstages, vstage_layers, std::move(layout), ""};
}

// Pipeline rank of each layer.
std::vector<int> RankOf(const MegatronPipeline& p) {
  std::vector<int> out;
  for (const LayerPlace& l : p.layers) out.push_back(l.pp_rank);
  return out;
}

std::vector<int> ChunkOf(const MegatronPipeline& p) {
  std::vector<int> out;
  for (const LayerPlace& l : p.layers) out.push_back(l.vstage);
  return out;
}

std::vector<int> LocalOf(const MegatronPipeline& p) {
  std::vector<int> out;
  for (const LayerPlace& l : p.layers) out.push_back(l.local);
  return out;
}

std::vector<int> Ranks(int64_t layers, const MegatronPipelineArgs& a) {
  Result<MegatronPipeline> p = MegatronPipelineOf(layers, a);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? RankOf(*p) : std::vector<int>{};
}

// Megatron's reason for rejecting `a`, or "" when it is accepted.
std::string Rejection(int64_t layers, const MegatronPipelineArgs& a) {
  Result<MegatronPipeline> p = MegatronPipelineOf(layers, a);
  return p.ok() ? "" : p.status().message();
}

bool Says(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

TEST(PipelineStagesTest, EvenSplitOrRejected) {
  EXPECT_EQ(Ranks(8, Args(4)), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  const std::string uneven = Rejection(61, Args(16));
  EXPECT_TRUE(Says(uneven, "num_layers=61")) << uneven;
  EXPECT_TRUE(Says(uneven, "pipeline_model_parallel_size=16")) << uneven;
  EXPECT_TRUE(Says(uneven, "first=N,last=M")) << uneven;
}

TEST(PipelineStagesTest, FirstAndLastStages) {
  // DeepSeek-V3: 61 = 3 + 14 * 4 + 2.
  std::vector<int> ds = Ranks(61, Args(16, 3, 2));
  ASSERT_EQ(ds.size(), 61u);
  EXPECT_EQ(ds[2], 0);
  EXPECT_EQ(ds[3], 1);
  EXPECT_EQ(ds[58], 14);
  EXPECT_EQ(ds[59], 15);
  // Only the first given: 7 = 1 + 3 * 2.
  EXPECT_EQ(Ranks(7, Args(4, 1, 0)), (std::vector<int>{0, 1, 1, 2, 2, 3, 3}));
  // Only the last given, pp 2: no middle stage.
  EXPECT_EQ(Ranks(5, Args(2, 0, 2)), (std::vector<int>{0, 0, 0, 1, 1}));
}

TEST(PipelineStagesTest, RejectsWhatMegatronRejects) {
  // 61 - 3 - 3 = 55 over 14 middle stages.
  EXPECT_TRUE(Says(Rejection(61, Args(16, 3, 3)),
                   "number of layers at middle stage: 55 must be divisible"));
  // pp 2 with first and last: no middle stage, but 61 - 30 - 30 = 1 layer left.
  EXPECT_TRUE(Says(Rejection(61, Args(2, 30, 30)),
                   "Mismatch: 1 middle layers remaining but 0 middle PP stages available."));
  EXPECT_NE(Rejection(8, Args(4, 6, 6)), "");  // more than the layers
  EXPECT_NE(Rejection(8, Args(1, 4, 4)), "");
}

TEST(PipelineStagesTest, InterleavedAsTransformerBlockComment) {
  // transformer_block.py: 8 layers, 2 stages, 2 virtual stages: stage 0 [0, 1] [4, 5],
  // stage 1 [2, 3] [6, 7].
  MegatronPipeline two = MegatronPipelineOf(8, Args(2, 0, 0, 2)).value();
  EXPECT_EQ(two.vpp, 2);
  EXPECT_EQ(RankOf(two), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(ChunkOf(two), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(LocalOf(two), (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  // 8 layers, 2 stages, 4 model chunks: stage 0 [0] [2] [4] [6], stage 1 [1] [3] [5] [7].
  MegatronPipeline four = MegatronPipelineOf(8, Args(2, 0, 0, 4)).value();
  EXPECT_EQ(RankOf(four), (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(ChunkOf(four), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(LocalOf(four), (std::vector<int>(8, 0)));
  // --num-layers-per-virtual-pipeline-stage 2: vpp = (8 / 2) / 2 = 2, the same placement.
  MegatronPipeline by_layers = MegatronPipelineOf(8, Args(2, 0, 0, 0, 2)).value();
  EXPECT_EQ(by_layers.vpp, 2);
  EXPECT_EQ(RankOf(by_layers), RankOf(two));
  EXPECT_EQ(LocalOf(by_layers), LocalOf(two));
  // A chunk of all of a rank's layers is no interleaving (vpp 1).
  EXPECT_EQ(MegatronPipelineOf(8, Args(2, 0, 0, 0, 4)).value().vpp, 1);
}

TEST(PipelineStagesTest, InterleavedUnevenAsLayerOffset) {
  // get_transformer_layer_offset with 12 layers, pp 4, first 2, last 2, vpp 2: chunks of 1 layer
  // on the first and last ranks and 4 / 2 = 2 on the middle ones, 6 layers per virtual stage;
  // rank p > 0 of chunk v starts at v * 6 + 1 + (p - 1) * 2.
  MegatronPipeline p = MegatronPipelineOf(12, Args(4, 2, 2, 2)).value();
  EXPECT_EQ(RankOf(p), (std::vector<int>{0, 1, 1, 2, 2, 3, 0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(ChunkOf(p), (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(LocalOf(p), (std::vector<int>{0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0}));
}

TEST(PipelineStagesTest, RejectsVirtualStagesAsMegatron) {
  EXPECT_TRUE(Says(Rejection(12, Args(4, 3, 3, 2)),
                   "number of layers at first stage: 3 must be divisible by virtual pipeline "
                   "parallel degree 2"));
  EXPECT_TRUE(Says(Rejection(10, Args(4, 2, 2, 2)),
                   "number of layers on each middle pipeline rank: 3 must be divisible"));
  EXPECT_TRUE(Says(Rejection(12, Args(4, 0, 0, 5)), "num_layers_per_pipeline_rank 3 must be"));
  EXPECT_TRUE(Says(Rejection(8, Args(2, 0, 0, 0, 3)),
                   "number of layers per pipeline stage must be divisible number of layers per "
                   "virtual pipeline stage"));
  EXPECT_TRUE(Says(Rejection(12, Args(4, 2, 2, 0, 1)),
                   "please use --num-virtual-stages-per-pipeline-rank"));
  EXPECT_TRUE(Says(Rejection(8, Args(2, 0, 0, 2, 2)), "No more than one of the following"));
  EXPECT_TRUE(Says(Rejection(8, Args(1, 0, 0, 2)),
                   "pipeline-model-parallel size should be greater than 1"));
}

TEST(PipelineStagesTest, ParsesAsParseStrToList) {
  // pipeline_parallel_layer_layout.py parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" is
  // [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]; "(|ab)*2,cd" unrolls to "|ab|abcd".
  std::vector<std::string> expected = {"Ettt"};
  for (int i = 0; i < 29; ++i) expected.push_back("tt");
  expected.push_back("m");
  expected.push_back("L");
  EXPECT_EQ(ParseMegatronPipelineLayout("Ettt|(tt|)*29,m|L").value(), expected);
  EXPECT_EQ(ParseMegatronPipelineLayout("(|tE)*2,tL").value(),
            (std::vector<std::string>{"", "tE", "tEtL"}));
  EXPECT_EQ(ParseMegatronPipelineLayout("Et*0|L").value(), (std::vector<std::string>{"E", "L"}));
}

TEST(PipelineStagesTest, LayoutStringAsMegatronsExample) {
  // docs/user-guide/features/pipeline_parallel_layout.md's DeepSeek-V3 layout for PP16 x VPP2
  // with its MTP stage left empty (no mtp): stage i is chunk i / 16 of
  // rank i % 16. Chunk 0: rank 0 layers 0-2, rank r layers 2r+1, 2r+2; chunk 1: rank r < 14 layers
  // 33 + 2r, 34 + 2r; rank 14 empty; rank 15 the loss.
  MegatronPipeline p = MegatronPipelineOf(61, Args(16, 0, 0, 0, 0, "Et*3|(tt|)*29,|L")).value();
  EXPECT_EQ(p.vpp, 2);
  ASSERT_EQ(p.layers.size(), 61u);
  auto at = [&](int l) { return std::vector<int>{p.layers[l].pp_rank, p.layers[l].vstage,
                                                 p.layers[l].local}; };
  EXPECT_EQ(at(2), (std::vector<int>{0, 0, 2}));
  EXPECT_EQ(at(3), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(at(32), (std::vector<int>{15, 0, 1}));
  EXPECT_EQ(at(33), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(at(60), (std::vector<int>{13, 1, 1}));
  for (const LayerPlace& l : p.layers) EXPECT_FALSE(l.pp_rank >= 14 && l.vstage == 1);
  // No VPP: one stage a rank.
  EXPECT_EQ(Ranks(4, Args(2, 0, 0, 0, 0, "Ettt|tL")), (std::vector<int>{0, 0, 0, 1}));
}

TEST(PipelineStagesTest, MtpBlockWhereMegatronPutsIt) {
  // The same document's layout with its MTP layer: "m" is stage 30, chunk 1 of rank 14 (a stage
  // before the loss's: get_mtp_ranks, "mtp_standalone").
  MegatronPipelineArgs args = Args(16, 0, 0, 0, 0, "Et*3|(tt|)*29,m|L");
  args.mtp_layers = 1;
  MegatronPipeline p = MegatronPipelineOf(61, args).value();
  EXPECT_EQ(p.mtp.pp_rank, 14);
  EXPECT_EQ(p.mtp.vstage, 1);
  // Without a layout string: the last virtual stage of the last rank (mtp_on_this_rank,
  // MultiTokenPredictionBlock's assertion).
  MegatronPipelineArgs interleaved = Args(4, 0, 0, 2);
  interleaved.mtp_layers = 1;
  p = MegatronPipelineOf(32, interleaved).value();
  EXPECT_EQ(p.mtp.pp_rank, 3);
  EXPECT_EQ(p.mtp.vstage, 1);
  EXPECT_EQ(MegatronPipelineOf(32, Args(4)).value().mtp.pp_rank, -1);
}

TEST(PipelineStagesTest, RejectsMtpLayoutsAsMegatron) {
  // megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout
  struct Case {
    int pp, mtp;
    std::string layout, reason;
  };
  const std::vector<Case> cases = {
      {2, 1, "Et|tL", "Number of mtp layers in layout must match mtp_num_layers (0 m in the layout, "
                      "mtp=1)"},
      {2, 1, "Etm|tL", "decoder layers must be placed before MTP layers"},
      {2, 1, "Et|tm|L|", "MTP should be always in the last virtual pipeline stage"},
      {3, 2, "Et|tm|mL", "All of the MTP layers must be in the same one virtual pipeline stage"},
  };
  for (const Case& c : cases) {
    Result<MegatronLayoutCounts> r = MegatronLayoutLayerCounts(c.layout, c.pp, 2, c.mtp);
    ASSERT_FALSE(r.ok()) << c.layout;
    EXPECT_TRUE(Says(r.status().message(), c.reason)) << c.layout << ": " << r.status().message();
  }
  // Two MTP layers together in the last stage are fine.
  EXPECT_EQ(MegatronLayoutLayerCounts("Et|tmmL", 2, 2, 2).value().mtp_stage, 1);
}

TEST(PipelineStagesTest, RejectsLayoutsAsMegatron) {
  struct Case {
    int64_t layers;
    int pp;
    std::string layout, reason;
  };
  const std::vector<Case> cases = {
      // 61 decoders in 31 stages ("Ettt", 29 x "tt", "L") do not divide over 16 ranks.
      {61, 16, "Et*3|(tt|)*29L", "divisible by pipeline_model_parallel_size (len(layout)=31"},
      {2, 2, "tE|tL", "The first layer must be embedding, but got t"},
      {2, 2, "Et|Lt", "The last layer must be loss, but got t"},
      {2, 2, "EtE|tL", "Embedding must be specified exactly once"},
      {2, 2, "EtL|tL", "Loss must be specified exactly once"},
      {3, 2, "Et|tL", "Number of decoder layers 2 must match num_layers 3"},
      {2, 2, "Et|tmL", "Number of mtp layers in layout must match"},
      {2, 2, "Et|txL", "Invalid layer character: x"},
      {2, 2, "Et|t*9999999L", "exceeds"},
      {2, 2, "E(tttt|)*500000L", "expands past"},
      {2, 1, "Et|tL", "should be greater than 1"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(Says(Rejection(c.layers, Args(c.pp, 0, 0, 0, 0, c.layout)), c.reason)) << c.layout;
  }
  EXPECT_TRUE(Says(Rejection(4, Args(2, 1, 0, 0, 0, "Et|tttL")), "cannot be set with other"));
  EXPECT_TRUE(Says(Rejection(4, Args(2, 0, 0, 2, 0, "Et|t|t|tL")), "No more than one"));
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

TEST(PipelineStagesTest, InterleavedChunksInTheLayout) {
  // llama-3.1-8b's 32 layers over pp 4 with 2 chunks a rank: chunk v of rank p holds layers
  // 16v + 4p .. 16v + 4p + 3, named model<v>.decoder.layers.0-3
  // (megatron/training/checkpointing.py).
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = BuildAsSpecified(p, "megatron:pp=4,vstages=2");
  EXPECT_EQ(FragmentsIn(l, 1, "model1.decoder.layers.0.self_attention.linear_proj.weight",
                        "model.layers.20.self_attn.o_proj.weight").size(), 1u);
  EXPECT_EQ(FragmentsIn(l, 1, "model0.decoder.layers.3.self_attention.linear_proj.weight",
                        "model.layers.7.self_attn.o_proj.weight").size(), 1u);
  EXPECT_GE(l.FindBuffer(0, "model0.embedding.word_embeddings.weight"), 0);
  EXPECT_GE(l.FindBuffer(3, "model1.output_layer.weight"), 0);
  EXPECT_GE(l.FindBuffer(3, "model1.decoder.final_layernorm.weight"), 0);
  EXPECT_EQ(l.FindBuffer(3, "model0.output_layer.weight"), -1);
  ExpectCoverage(l, p, Copies(1, 1, 0));
}

TEST(PipelineStagesTest, LayoutStringInTheSpec) {
  // The layout key comes last and keeps its commas.
  FrameworkSpec spec = Spec("megatron:pp=16,ep=16,layout=Et*3|(tt|)*29,|L");
  EXPECT_EQ(spec.megatron.layout, "Et*3|(tt|)*29,|L");
  EXPECT_EQ(spec.ToString(), "megatron:tp=1,pp=16,ep=16,cp=1,layout=Et*3|(tt|)*29,|L");
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  Layout l = BuildAsSpecified(ds, "megatron:pp=16,ep=16,layout=Et*3|(tt|)*29,|L");
  // Rank 0 (pp 0) holds layers 33 and 34 as chunk 1; pp 14 (rank 224) has an empty chunk 1; pp 15
  // (rank 240) holds layer 32 as model0.decoder.layers.1 and the output layer in chunk 1.
  EXPECT_EQ(FragmentsIn(l, 0, "model1.decoder.layers.1.self_attention.linear_proj.weight",
                        "model.layers.34.self_attn.o_proj.weight").size(), 1u);
  EXPECT_EQ(l.FindBuffer(224, "model1.decoder.layers.0.self_attention.linear_proj.weight"), -1);
  EXPECT_EQ(FragmentsIn(l, 240, "model0.decoder.layers.1.self_attention.linear_proj.weight",
                        "model.layers.32.self_attn.o_proj.weight").size(), 1u);
  EXPECT_GE(l.FindBuffer(240, "model1.output_layer.weight"), 0);
  Result<Layout> hybrid = BuildFrameworkLayout(Preset("nemotron-h-8b", 1.0 / 64),
                                               Spec("megatron:pp=2,vstages=2"));
  ASSERT_FALSE(hybrid.ok());
  EXPECT_TRUE(Says(hybrid.status().message(), "--hybrid-layer-pattern"));
}

}  // namespace
}  // namespace ferry::models
