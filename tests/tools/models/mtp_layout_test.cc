// Tests for the multi-token prediction (MTP) layers of the framework layouts: hand-worked boxes,
// buffers and offsets of a tiny DeepSeek-like model with one MTP layer, derived from the upstream
// code each case names (Megatron-Core's megatron/core/transformer/multi_token_prediction.py and
// megatron/core/models/gpt/gpt_model.py, Megatron-Bridge's
// src/megatron/bridge/models/deepseek/common.py, vLLM's
// vllm/model_executor/models/deepseek_mtp.py and vllm/v1/spec_decode/llm_base_proposer.py), and
// the configurations the frameworks reject.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

// TinyDeepseek (framework_layouts_testutil.h) with one MTP layer, model.layers.2.
ModelConfig TinyDeepseekWithMtp(bool moe) {
  ModelConfig c = TinyDeepseek(moe);
  c.mtp_layers = 1;
  return c;
}

TEST(MtpLayoutTest, CheckpointTensorsOfTheMtpLayer) {
  // DeepSeek-V3's checkpoint: model.layers.61.{enorm, hnorm, eh_proj, shared_head.norm} and the
  // decoder layer's tensors under the same prefix (a MoE layer like the last one).
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  EXPECT_EQ(ds.config().nextn_layers, 1);
  EXPECT_EQ(ds.Find("model.layers.61.enorm.weight"), nullptr);  // none unless asked for
  ModelPreset with = WithMtpLayers(ds, 1).value();
  const int64_t h = ds.config().hidden;
  EXPECT_EQ(with.Find("model.layers.61.eh_proj.weight")->shape, (std::vector<int64_t>{h, 2 * h}));
  EXPECT_EQ(with.Find("model.layers.61.shared_head.norm.weight")->shape, (std::vector<int64_t>{h}));
  EXPECT_NE(with.Find("model.layers.61.mlp.experts.255.down_proj.weight"), nullptr);
  EXPECT_NE(with.Find("model.layers.61.mlp.gate.e_score_correction_bias"), nullptr);
  EXPECT_EQ(with.Find("model.layers.61.embed_tokens.weight"), nullptr);  // the model's own
  EXPECT_FALSE(WithMtpLayers(ds, 2).ok());
  EXPECT_EQ(Preset("kimi-k2", 1.0 / 64).config().nextn_layers, 0);  // num_nextn_predict_layers 0
}

TEST(MtpLayoutTest, MegatronMtpBlockOnTheLastStage) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  // tp 2, pp 2, ep 1 (etp = tp): ranks 0-1 stage 0, ranks 2-3 stage 1; the vocabulary padded to a
  // multiple of 32 * 2 = 64, 32 rows a rank.
  Layout l = Build(p, "megatron:tp=2,pp=2,vocab_divisible_by=32,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    // the embedding on stage 0 and its copy on the MTP stage
    if (n == "model.embed_tokens.weight") return 2;
    return TpReplicated(n) && !IsExpert(n) ? 2 : 1;
  });
  // ColumnParallelLinear(2h -> h): TP rank i holds output rows [4i, 4i + 4) of [8, 16].
  for (int i = 0; i < 2; ++i) {
    auto eh = FragmentsIn(l, 2 + i, "mtp.layers.0.eh_proj.weight", "model.layers.2.eh_proj.weight");
    ASSERT_EQ(eh.size(), 1u);
    EXPECT_EQ(eh[0].box.lo[0], 4 * i);
    EXPECT_EQ(eh[0].box.hi[0], 4 * i + 4);
    EXPECT_EQ(eh[0].box.hi[1], 16);
    EXPECT_EQ(eh[0].loc.byte_offset, 0);
    EXPECT_EQ(l.buffers[l.FindBuffer(2 + i, "mtp.layers.0.eh_proj.weight")].bytes, 4 * 16 * 2);
  }
  EXPECT_EQ(FragmentsIn(l, 3, "mtp.layers.0.enorm.weight", "model.layers.2.enorm.weight").size(), 1u);
  EXPECT_EQ(FragmentsIn(l, 3, "mtp.layers.0.hnorm.weight", "model.layers.2.hnorm.weight").size(), 1u);
  // Megatron-Bridge: final_layernorm <-> shared_head.norm, the decoder layer under mtp_model_layer.
  EXPECT_EQ(FragmentsIn(l, 2, "mtp.layers.0.final_layernorm.weight",
                        "model.layers.2.shared_head.norm.weight").size(), 1u);
  auto q_up = FragmentsIn(l, 3, "mtp.layers.0.mtp_model_layer.self_attention.linear_q_up_proj.weight",
                          "model.layers.2.self_attn.q_b_proj.weight");
  ASSERT_EQ(q_up.size(), 1u);
  EXPECT_EQ(q_up[0].box.lo[0], 4);  // head 1's 4 rows of [8, 4]
  EXPECT_EQ(FragmentsIn(l, 2, "mtp.layers.0.mtp_model_layer.mlp.router.weight",
                        "model.layers.2.mlp.gate.weight").size(), 1u);
  // Routed experts as the decoder's (SequentialMLP, ep 1): every expert on both TP ranks, FFN rows
  // split in two: rank 3 holds expert 3's gate rows [2, 4), then its up rows [2, 4).
  auto fc1 = "mtp.layers.0.mtp_model_layer.mlp.experts.local_experts.3.linear_fc1.weight";
  auto up = FragmentsIn(l, 3, fc1, "model.layers.2.mlp.experts.3.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 2);
  EXPECT_EQ(up[0].loc.byte_offset, 2 * 8 * 2);
  // gpt_model.py: the MTP stage builds the embedding too, a copy with the first stage's split.
  auto copy = FragmentsIn(l, 3, "embedding.word_embeddings.weight", "model.embed_tokens.weight");
  ASSERT_EQ(copy.size(), 1u);
  EXPECT_EQ(copy[0].box.lo[0], 32);
  EXPECT_EQ(copy[0].box.hi[0], 64);
  // Nothing of it on stage 0; the decoder's last layer stays decoder.layers.0 of stage 1.
  EXPECT_EQ(l.FindBuffer(0, "mtp.layers.0.eh_proj.weight"), -1);
  EXPECT_EQ(FragmentsIn(l, 2, "decoder.layers.0.mlp.router.weight",
                        "model.layers.1.mlp.gate.weight").size(), 1u);
}

TEST(MtpLayoutTest, MegatronMtpStandaloneByLayoutString) {
  // "Et|t|m|L" over pp 2: stage 2 ("m") is chunk 1 of rank 0, a stage without the embedding of
  // chunk 0, so it keeps its own copy (model1.embedding...); the loss is chunk 1 of rank 1.
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(false));
  Layout l = Build(p, "megatron:pp=2,vocab_divisible_by=64,mtp=1,layout=Et|t|m|L");
  EXPECT_EQ(FragmentsIn(l, 0, "model1.mtp.layers.0.eh_proj.weight",
                        "model.layers.2.eh_proj.weight").size(), 1u);
  EXPECT_EQ(FragmentsIn(l, 0, "model1.embedding.word_embeddings.weight",
                        "model.embed_tokens.weight").size(), 1u);
  EXPECT_EQ(FragmentsIn(l, 0, "model0.embedding.word_embeddings.weight",
                        "model.embed_tokens.weight").size(), 1u);
  EXPECT_GE(l.FindBuffer(1, "model1.output_layer.weight"), 0);
  EXPECT_EQ(l.FindBuffer(1, "model1.mtp.layers.0.eh_proj.weight"), -1);
  // On the embedding's own stage (pp 1) there is no second copy.
  Layout one = Build(p, "megatron:tp=1,vocab_divisible_by=64,mtp=1");
  EXPECT_EQ(FragmentsIn(one, 0, "embedding.word_embeddings.weight", "model.embed_tokens.weight").size(),
            1u);
  EXPECT_GE(one.FindBuffer(0, "mtp.layers.0.enorm.weight"), 0);
}

TEST(MtpLayoutTest, MegatronDistributedOptimizerOrder) {
  // Rank 1 (tp 1, pp 2: stage 1) in named_parameters() order: the embedding copy (512 elements,
  // shared_embedding), decoder.layers.0 (input_layernorm 8, linear_proj 32, linear_q_down_proj 32,
  // linear_q_up_proj.layer_norm_weight 4, linear_q_up_proj 32, linear_kv_down_proj 48,
  // linear_kv_up_proj.layer_norm_weight 4, linear_kv_up_proj 32, linear_fc1.layer_norm_weight 8,
  // linear_fc1 256, linear_fc2 128), decoder.final_layernorm 8, mtp.layers.0 (enorm 8, hnorm 8,
  // eh_proj 128, mtp_model_layer as decoder.layers.0, final_layernorm 8), output_layer 512.
  // distrib_optimizer.py lays them out in reverse, each start rounded up to 64, the embedding in a
  // bucket of its own that starts at the previous bucket's end padded to 128:
  // output_layer 0, final_layernorm 512, mtp_model_layer.linear_fc2 576, ... its input_layernorm
  // 1472, eh_proj 1536, hnorm 1664, enorm 1728, decoder.final_layernorm 1792, decoder.layers.0's
  // linear_fc2 1856, ... its input_layernorm 2752 (ends 2760, bucket end 2816), embedding 2816.
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(false));
  Layout l = Build(p, "megatron:pp=2,vocab_divisible_by=64,mtp=1,buffers=distopt");
  auto start = [&](const std::string& tensor) {
    auto f = FragmentsIn(l, 1, "buffers.0.param_data", tensor);
    EXPECT_EQ(f.size(), 1u) << tensor;
    return f.empty() ? -1 : f[0].loc.byte_offset / 2;
  };
  EXPECT_EQ(start("lm_head.weight"), 0);
  EXPECT_EQ(start("model.layers.2.shared_head.norm.weight"), 512);
  EXPECT_EQ(start("model.layers.2.mlp.down_proj.weight"), 576);
  EXPECT_EQ(start("model.layers.2.input_layernorm.weight"), 1472);
  EXPECT_EQ(start("model.layers.2.eh_proj.weight"), 1536);
  EXPECT_EQ(start("model.layers.2.hnorm.weight"), 1664);
  EXPECT_EQ(start("model.layers.2.enorm.weight"), 1728);
  EXPECT_EQ(start("model.norm.weight"), 1792);
  EXPECT_EQ(start("model.layers.1.mlp.down_proj.weight"), 1856);
  EXPECT_EQ(start("model.layers.1.input_layernorm.weight"), 2752);
  EXPECT_EQ(start("model.embed_tokens.weight"), 2816);
  EXPECT_EQ(l.buffers[l.FindBuffer(1, "buffers.0.param_data")].bytes, 3328 * 2);
}

TEST(MtpLayoutTest, VllmDrafterLayers) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "vllm:tp=2,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    return n == "model.layers.2.eh_proj.weight" || (TpReplicated(n) && !IsExpert(n)) ? 2 : 1;
  });
  // deepseek_mtp.py: eh_proj a replicated linear, the whole [8, 16] on each rank.
  for (int rank : {0, 1}) {
    auto eh = FragmentsIn(l, rank, "model.layers.2.eh_proj.weight", "model.layers.2.eh_proj.weight");
    ASSERT_EQ(eh.size(), 1u);
    EXPECT_EQ(eh[0].box.lo[0], 0);
    EXPECT_EQ(eh[0].box.hi[0], 8);
    EXPECT_EQ(l.buffers[l.FindBuffer(rank, "model.layers.2.eh_proj.weight")].bytes, 8 * 16 * 2);
  }
  EXPECT_EQ(FragmentsIn(l, 1, "model.layers.2.shared_head.norm.weight",
                        "model.layers.2.shared_head.norm.weight").size(), 1u);
  // mtp_block: a DeepseekV2DecoderLayer sharded as the target's (q_b_proj by head, FusedMoE).
  auto q_b = FragmentsIn(l, 1, "model.layers.2.mtp_block.self_attn.q_b_proj.weight",
                         "model.layers.2.self_attn.q_b_proj.weight");
  ASSERT_EQ(q_b.size(), 1u);
  EXPECT_EQ(q_b[0].box.lo[0], 4);
  // w13 of rank 1 (ep 1, FFN split in two): expert e's [gate rows 2-3; up rows 2-3], 4 rows of 8.
  auto w13 = "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight";
  auto up = FragmentsIn(l, 1, w13, "model.layers.2.mlp.experts.1.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 2);
  EXPECT_EQ(up[0].loc.byte_offset, (1 * 4 + 2) * 8 * 2);
  // llm_base_proposer.py: the drafter shares the target's embed_tokens and lm_head; no copy.
  for (const BufferSpec& b : l.buffers) {
    EXPECT_EQ(b.name.find("shared_head.head"), std::string::npos);
    EXPECT_TRUE(b.name.find("embed_tokens") == std::string::npos ||
                b.name == "model.embed_tokens.weight");
  }
}

// SGLang's NextN draft (models/deepseek_nextn.py DeepseekV3ForCausalLMNextN): model.enorm,
// model.hnorm, model.eh_proj (an nn.Linear, whole), model.shared_head.norm and model.decoder, a
// DeepseekV2DecoderLayer sharded as the target's; its embed_tokens and lm_head are the target's
// (speculative/eagle_worker_v2.py set_embed_and_head), and deepseek_common/
// deepseek_weight_loader.py skips the MTP layer's copies of them.
TEST(MtpLayoutTest, SglangNextnDraft) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "sglang:tp=2,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    return n == "model.layers.2.eh_proj.weight" || (TpReplicated(n) && !IsExpert(n)) ? 2 : 1;
  });
  for (int rank : {0, 1}) {
    auto eh = FragmentsIn(l, rank, "model.eh_proj.weight", "model.layers.2.eh_proj.weight");
    ASSERT_EQ(eh.size(), 1u);
    EXPECT_EQ(eh[0].box.hi[0] - eh[0].box.lo[0], 8);
    EXPECT_EQ(eh[0].box.hi[1] - eh[0].box.lo[1], 16);
    EXPECT_EQ(l.buffers[l.FindBuffer(rank, "model.eh_proj.weight")].bytes, 8 * 16 * 2);
    EXPECT_EQ(FragmentsIn(l, rank, "model.enorm.weight", "model.layers.2.enorm.weight").size(), 1u);
  }
  // model.decoder: q_b_proj by head (rank 1: head 1, rows 4..8 of [8, 4]); FusedMoE's w13 of
  // rank 1 (ep 1, FFN split in two): expert 1's up rows 2..4 after its gate rows 2..4.
  auto q_b = FragmentsIn(l, 1, "model.decoder.self_attn.q_b_proj.weight",
                         "model.layers.2.self_attn.q_b_proj.weight");
  ASSERT_EQ(q_b.size(), 1u);
  EXPECT_EQ(q_b[0].box.lo[0], 4);
  EXPECT_EQ(q_b[0].box.hi[0], 8);
  auto up = FragmentsIn(l, 1, "model.decoder.mlp.experts.w13_weight",
                        "model.layers.2.mlp.experts.1.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 2);
  EXPECT_EQ(up[0].loc.byte_offset, (1 * 4 + 2) * 8 * 2);
  // four routed experts and one shared: SGLang fuses only DeepSeek-V3's 256, so it stays apart
  EXPECT_GE(l.FindBuffer(0, "model.decoder.mlp.shared_experts.gate_up_proj.weight"), 0);
  for (const BufferSpec& b : l.buffers) {
    EXPECT_EQ(b.name.find("shared_head.head"), std::string::npos) << b.name;
    EXPECT_TRUE(b.name.find("embed_tokens") == std::string::npos ||
                b.name == "model.embed_tokens.weight") << b.name;
  }
  const FrameworkSpec r = ResolveFrameworkSpec(Spec("sglang:tp=2,mtp=1"), p.config()).value();
  std::string rules;
  for (const LayoutRule& rule : RulesForTensor(p.config(), r, "model.layers.2.eh_proj.weight")) {
    rules += rule.rule + " [" + rule.upstream + "]\n";
  }
  EXPECT_NE(rules.find("NextN draft's model.eh_proj.weight"), std::string::npos) << rules;
  EXPECT_NE(rules.find("models/deepseek_nextn.py"), std::string::npos) << rules;
}

// With pp > 1 only the last PP stage has a draft (managers/scheduler.py: "non-last stages have
// no draft worker"), and there the target has no embed_tokens: the draft keeps its own, split as
// the target's (speculative/pp_draft_embedding.py load_draft_embedding_from_checkpoint), which
// ferry writes every refit. tp 2, pp 2: stage 0 is ranks 0-1 (embed_tokens, layer 0), stage 1
// ranks 2-3 (layer 1, norm, lm_head and the draft).
TEST(MtpLayoutTest, SglangNextnDraftOnTheLastPipelineStage) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "sglang:tp=2,pp=2,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (n == "model.embed_tokens.weight") return 2;  // the target's and the draft's own
    return n == "model.layers.2.eh_proj.weight" || (TpReplicated(n) && !IsExpert(n)) ? 2 : 1;
  });
  for (int rank : {0, 1}) {
    EXPECT_LT(l.FindBuffer(rank, "model.eh_proj.weight"), 0);
    EXPECT_LT(l.FindBuffer(rank, "model.decoder.self_attn.q_b_proj.weight"), 0);
  }
  for (int rank : {2, 3}) {
    EXPECT_GE(l.FindBuffer(rank, "model.eh_proj.weight"), 0);
    EXPECT_GE(l.FindBuffer(rank, "model.decoder.mlp.experts.w13_weight"), 0);
    // 64 rows (a multiple of 64) in two blocks of 32, as the target's on ranks 0-1
    auto embed = FragmentsIn(l, rank, "model.embed_tokens.weight", "model.embed_tokens.weight");
    ASSERT_EQ(embed.size(), 1u);
    EXPECT_EQ(embed[0].box.lo[0], 32 * (rank - 2));
    EXPECT_EQ(embed[0].box.hi[0], 32 * (rank - 1));
  }
}

// What ferry does not model of SGLang's drafts is refused, naming why.
TEST(MtpLayoutTest, SglangDraftsFerryDoesNotModel) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Result<Layout> redundant = BuildFrameworkLayout(p, Spec("sglang:tp=2,ep=2,redundant=2,mtp=1"));
  ASSERT_FALSE(redundant.ok());
  EXPECT_NE(redundant.status().message().find("mtp=1 with redundant experts"), std::string::npos)
      << redundant.status().message();
  Result<Layout> llama = BuildFrameworkLayout(Preset("llama-3.1-8b", 1.0 / 64),
                                              Spec("sglang:tp=2,mtp=1"));
  ASSERT_FALSE(llama.ok());
  EXPECT_NE(llama.status().message().find("has 0 MTP layer(s)"), std::string::npos)
      << llama.status().message();
}

// vllm/v1/worker/gpu_model_runner.py builds the drafter on the last PP rank only; with pp > 1
// llm_base_proposer.py _maybe_share_embeddings does not share the target's embed_tokens (the
// first rank's), so the drafter keeps the copy it loads (deepseek_mtp.py: the checkpoint's
// model.layers.2.embed_tokens renamed model.embed_tokens), a VocabParallelEmbedding split over
// TP; _maybe_share_lm_head gives shared_head.head the target's lm_head, which that rank holds.
// tp 2, pp 2: PP rank 0 is ranks 0, 1 (layer 0, embed_tokens), PP rank 1 ranks 2, 3 (layer 1,
// norm, lm_head and the drafter).
TEST(MtpLayoutTest, VllmDrafterOnTheLastPipelineRank) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "vllm:tp=2,pp=2,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (n == "model.embed_tokens.weight") return 2;  // the target's and the drafter's
    return n == "model.layers.2.eh_proj.weight" || (TpReplicated(n) && !IsExpert(n)) ? 2 : 1;
  });
  for (int rank = 0; rank < 4; ++rank) {
    const bool last = rank >= 2;
    EXPECT_EQ(l.FindBuffer(rank, "model.layers.2.eh_proj.weight") >= 0, last) << rank;
    EXPECT_EQ(
        l.FindBuffer(rank, "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight") >= 0,
        last)
        << rank;
    EXPECT_EQ(l.FindBuffer(rank, "lm_head.weight") >= 0, last) << rank;
    EXPECT_GE(l.FindBuffer(rank, "model.embed_tokens.weight"), 0) << rank;
    // the padded vocabulary of 64 over tp 2: rows 0..31 on TP rank 0, 32..63 on TP rank 1
    auto embed = FragmentsIn(l, rank, "model.embed_tokens.weight", "model.embed_tokens.weight");
    ASSERT_EQ(embed.size(), 1u) << rank;
    EXPECT_EQ(embed[0].box.lo[0], rank % 2 * 32) << rank;
    EXPECT_EQ(embed[0].box.hi[0], rank % 2 * 32 + 32) << rank;
  }
  for (const BufferSpec& b : l.buffers) {
    EXPECT_EQ(b.name.find("shared_head.head"), std::string::npos);
  }
  // ep 1: the drafter's FusedMoE over its stage's 2 ranks, rank 3 FFN rows 2-3 of every expert
  auto up = FragmentsIn(l, 3, "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight",
                        "model.layers.2.mlp.experts.1.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 2);
  EXPECT_EQ(up[0].loc.byte_offset, (1 * 4 + 2) * 8 * 2);
  const FrameworkSpec resolved =
      ResolveFrameworkSpec(Spec("vllm:tp=2,pp=2,mtp=1"), p.config()).value();
  std::string rules;
  for (const LayoutRule& r : RulesForTensor(p.config(), resolved, "model.embed_tokens.weight")) {
    rules += r.rule + " | " + r.upstream + "\n";
  }
  EXPECT_NE(rules.find("vllm/v1/spec_decode/llm_base_proposer.py"), std::string::npos) << rules;
}

// dp 2, ep = tp*dp = 4: ranks (dp_rank*pp + pp_rank)*tp + tp_rank, so PP rank 1 is ranks 2, 3
// (DP 0) and 6, 7 (DP 1); the drafter's experts go one each to its EP ranks 0..3 = ranks 2, 3,
// 6, 7 (vllm/distributed/parallel_state.py: the EP group of a PP stage is its DP x TP ranks).
TEST(MtpLayoutTest, VllmDrafterExpertsOverTheLastStagesEpGroup) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "vllm:tp=2,pp=2,dp=2,ep=4,mtp=1");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (IsExpert(n)) return 1;
    if (n == "model.embed_tokens.weight") return 4;  // target and drafter, in both DP replicas
    if (n.find(".mlp.shared_experts.") != std::string::npos) return 4;  // sequence-parallel MoE
    return n == "model.layers.2.eh_proj.weight" || TpReplicated(n) ? 4 : 2;
  });
  const std::string w13 = "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight";
  const int ranks[4] = {2, 3, 6, 7};
  for (int e = 0; e < 4; ++e) {
    auto gate = FragmentsIn(l, ranks[e], w13,
                            "model.layers.2.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
    ASSERT_EQ(gate.size(), 1u) << e;
    EXPECT_EQ(gate[0].loc.byte_offset, 0);
  }
  for (int rank : {0, 1, 4, 5}) EXPECT_LT(l.FindBuffer(rank, w13), 0) << rank;
}

// EPLB with the drafter: its FusedMoE gets the same num_redundant_experts (deepseek_v2.py
// DeepseekV2MoE: n_physical_experts = n_logical_experts + eplb_config.num_redundant_experts), and
// before a rearrangement the same initial map (vllm/distributed/eplb/eplb_state.py
// build_initial_global_physical_to_logical_map: [0..E), then i mod E). 4 experts + 2 redundant
// over ep = tp = 2: 3 physical a rank, rank 0 physical 0-2 = logical 0, 1, 2, rank 1 physical
// 3-5 = logical 3, 0, 1; w13 of one expert [2 * 4, 8] bf16 = 128 bytes.
TEST(MtpLayoutTest, VllmDrafterRedundantExpertsAsTheTargets) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  const std::string spec = "vllm:tp=2,ep=2,redundant=2,mtp=1";
  Layout stacks = BuildAsSpecified(p, spec);
  const std::string w13 = "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight";
  const std::string gate = "model.layers.2.mlp.experts.[0:4].gate_proj.weight";
  EXPECT_EQ(SlotsOf(stacks, 0, w13, gate, 128), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(SlotsOf(stacks, 1, w13, gate, 128), (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(stacks.buffers[stacks.FindBuffer(1, w13)].bytes, 3 * 128);
  Layout members = Build(p, spec);
  ExpectCoverage(members, p, [](const std::string& n) {
    if (IsExpert(n)) {
      const bool replicated = n.find(".experts.0.") != std::string::npos ||
                              n.find(".experts.1.") != std::string::npos;
      return replicated ? 2 : 1;
    }
    return n == "model.layers.2.eh_proj.weight" || TpReplicated(n) ? 2 : 1;
  });
}

// After a rearrangement the drafter's experts follow its own map: vllm/v1/worker/gpu_model_runner.py
// load_model registers the drafter with EplbState.add_model as a model of its own, whose
// physical_to_logical_map has num_nextn_predict_layers rows (deepseek_mtp.py
// set_moe_parameters), rebalanced by rearrange() with the target's. Target row [0, 1, 2, 3, 0, 1]
// (layer 1), drafter row [1, 2, 3, 0, 3, 2] (layer 2): rank 1's drafter slots hold 0, 3, 2.
TEST(MtpLayoutTest, VllmDrafterExpertsFollowTheDraftersEplbMap) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  const std::string map = WriteTemp("drafter.json", R"({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1]],
      "drafter": {"physical_to_logical_map": [[1, 2, 3, 0, 3, 2]]}})");
  const std::string spec = "vllm:tp=2,dp=1,ep=2,redundant=2,eplb_map=" + map + ",mtp=1";
  Layout stacks = BuildAsSpecified(p, spec);
  const std::string w13 = "model.layers.2.mtp_block.mlp.experts.routed_experts.w13_weight";
  const std::string gate = "model.layers.2.mlp.experts.[0:4].gate_proj.weight";
  EXPECT_EQ(SlotsOf(stacks, 0, w13, gate, 128), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(SlotsOf(stacks, 1, w13, gate, 128), (std::vector<int64_t>{0, 3, 2}));
  EXPECT_EQ(SlotsOf(stacks, 1, "model.layers.1.mlp.experts.routed_experts.w13_weight",
                    "model.layers.1.mlp.experts.[0:4].gate_proj.weight", 128),
            (std::vector<int64_t>{3, 0, 1}));
  Layout members = Build(p, spec);
  ExpectCoverage(members, p, [](const std::string& n) {
    if (IsExpert(n)) {
      const bool layer1 = n.find("layers.1.") != std::string::npos;
      const char* twice[2] = {layer1 ? ".experts.0." : ".experts.2.",
                              layer1 ? ".experts.1." : ".experts.3."};
      return n.find(twice[0]) != std::string::npos || n.find(twice[1]) != std::string::npos ? 2 : 1;
    }
    return n == "model.layers.2.eh_proj.weight" || TpReplicated(n) ? 2 : 1;
  });
  EXPECT_EQ(Spec(spec).ToString(), spec);
  const FrameworkSpec resolved = ResolveFrameworkSpec(Spec(spec), p.config()).value();
  std::string rules;
  for (const LayoutRule& r :
       RulesForTensor(p.config(), resolved, "model.layers.2.mlp.experts.0.gate_proj.weight")) {
    rules += r.rule + " | " + r.upstream + "\n";
  }
  EXPECT_NE(rules.find("\"drafter\" rows"), std::string::npos) << rules;
}

TEST(MtpLayoutTest, VllmEplbMapsWithoutTheDraftersAreRefused) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  const std::pair<std::string, const char*> files[] = {
      {"[[0, 1, 2, 3, 0, 1]]", "has no \"drafter\" map"},
      {R"({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1]]})", "has no \"drafter\" map"},
      {R"({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1]], "drafter": [[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 0, 1]]})",
       "drafter has 2 rows; the drafter has 1 MoE layers"},
      {R"({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1]], "drafter": [[0, 1, 2, 2, 0, 1]]})",
       "drafter, row 0: logical expert 3 has no physical replica"},
  };
  int n = 0;
  for (const auto& [text, reason] : files) {
    const std::string path = WriteTemp("nodrafter" + std::to_string(n++) + ".json", text);
    Result<Layout> l =
        BuildFrameworkLayout(p, Spec("vllm:tp=2,ep=2,redundant=2,mtp=1,eplb_map=" + path));
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_TRUE(Says(l.status(), reason)) << l.status().ToString();
  }
  const std::string with = WriteTemp("with.json", R"({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1]],
      "drafter": [[0, 1, 2, 3, 0, 1]]})");
  Result<Layout> l = BuildFrameworkLayout(p, Spec("vllm:tp=2,ep=2,redundant=2,eplb_map=" + with));
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(Says(l.status(), "the engine has no MTP drafter")) << l.status().ToString();
}

// A DeepSeek-like model whose partitions are whole 128-blocks (BlockAlignedDeepseek, 4 experts)
// with its MTP layer built.
ModelConfig Fp8Deepseek() {
  ModelConfig c = BlockAlignedDeepseek(4);
  c.mtp_layers = 1;
  return c;
}

// vLLM's FP8 drafter: the draft model takes the target's quantization (vllm/config/speculative.py
// for mtp: quantization = target_model_config.quantization), deepseek_mtp.py builds mtp_block, a
// DeepseekV2DecoderLayer, with vllm_config.quant_config (projections fp8 with weight_scale_inv as
// the target's, vllm/model_executor/layers/quantization/fp8.py) but eh_proj as a plain nn.Linear
// (the model's bf16), and the norms as RMSNorm. tp 2, ep 1: per rank q_b_proj [2 * 128, 128]
// (2 x 1 blocks), fused_qkv_a_proj [128 + 192, 256] (3 x 2 blocks), o_proj [256, 2 * 64] (2 x 1), experts
// w13 [4, 2 * 128, 256] (4 x 2 x 2 blocks) and w2 [4, 256, 128] (4 x 2 x 1).
TEST(MtpLayoutTest, VllmFp8DrafterQuantizesItsDecoderLayerNotEhProj) {
  ModelPreset p = PresetOf(Fp8Deepseek());
  Layout l = Build(p, "vllm:tp=2,mtp=1,quant=fp8_block");
  const std::string b = "model.layers.2.mtp_block.";
  for (int rank : {0, 1}) {
    EXPECT_EQ(BytesOf(l, rank, b + "self_attn.q_b_proj.weight"), 256 * 128);
    EXPECT_EQ(BytesOf(l, rank, b + "self_attn.q_b_proj.weight_scale_inv"), 2 * 1 * 4);
    EXPECT_EQ(BytesOf(l, rank, b + "self_attn.fused_qkv_a_proj.weight"), 320 * 256);
    EXPECT_EQ(BytesOf(l, rank, b + "self_attn.fused_qkv_a_proj.weight_scale_inv"), 3 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, b + "self_attn.o_proj.weight_scale_inv"), 2 * 1 * 4);
    EXPECT_EQ(BytesOf(l, rank, b + "mlp.experts.routed_experts.w13_weight"), 4 * 256 * 256);
    EXPECT_EQ(BytesOf(l, rank, b + "mlp.experts.routed_experts.w13_weight_scale_inv"),
              4 * 2 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, b + "mlp.experts.routed_experts.w2_weight_scale_inv"),
              4 * 2 * 1 * 4);
    EXPECT_EQ(BytesOf(l, rank, "model.layers.2.eh_proj.weight"), 256 * 512 * 2);
    EXPECT_EQ(BytesOf(l, rank, "model.layers.2.eh_proj.weight_scale_inv"), -1);
  }
  // k rows of the fused [q_a; kv_a] at one byte an element: after q_a's 128 rows of 256
  auto kv_a = FragmentsIn(l, 1, b + "self_attn.fused_qkv_a_proj.weight",
                          "model.layers.2.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kv_a.size(), 1u);
  EXPECT_EQ(kv_a[0].loc.byte_offset, 128 * 256);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.self_attn.q_b_proj.weight"), DType::kFP8E4M3);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.mlp.experts.3.down_proj.weight"), DType::kFP8E4M3);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.mlp.shared_experts.down_proj.weight"), DType::kFP8E4M3);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.eh_proj.weight"), DType::kBF16);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.enorm.weight"), DType::kBF16);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.shared_head.norm.weight"), DType::kBF16);
  EXPECT_EQ(DTypeOf(l, "model.layers.2.mlp.gate.weight"), DType::kBF16);
  for (const StoredTransform& t : l.transforms) {
    EXPECT_NE(l.tensors[static_cast<size_t>(t.tensor)].name, "model.layers.2.eh_proj.weight");
  }
}

// With pp 2 the drafter and its scales are on the last PP rank's ranks 2, 3 only; with UE8M0
// scales (VLLM_USE_DEEP_GEMM_E8M0) its q_b_proj [256, 128] runs on DeepGEMM (rows % 64, cols %
// 128, bf16: fp8_utils.py requant_weight_ue8m0_inplace) as the target's linear weights do, its
// experts too, and eh_proj has no block scales at all.
TEST(MtpLayoutTest, VllmFp8DrafterScalesOnTheLastPipelineRank) {
  ModelPreset p = PresetOf(Fp8Deepseek());
  Layout l = Build(p, "vllm:tp=2,pp=2,mtp=1,quant=fp8_block,scale_fmt=ue8m0");
  const std::string qb = "model.layers.2.mtp_block.self_attn.q_b_proj.weight";
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(l.FindBuffer(rank, qb + "_scale_inv") >= 0, rank >= 2) << rank;
  }
  int ue8m0 = 0;
  for (const BlockScaledBuffer& s : l.block_scaled) {
    const std::string& name = l.buffers[static_cast<size_t>(s.buffer)].name;
    EXPECT_EQ(name.find("eh_proj"), std::string::npos);
    if (name == qb || name == "model.layers.2.mtp_block.mlp.experts.routed_experts.w2_weight") {
      EXPECT_EQ(s.scale_fmt, Fp8ScaleFormat::kUe8m0) << name;
      ++ue8m0;
    }
  }
  EXPECT_EQ(ue8m0, 4);  // two buffers on ranks 2 and 3
}

// --mtp-use-repeated-layer: MultiTokenPredictionBlock._build_layers builds one layer (layer_number
// 1, mtp.layers.0) and forward applies layers[0] at every one of the mtp_num_layers depths
// (megatron/core/transformer/multi_token_prediction.py; get_gpt_mtp_block_spec gives one layer
// spec). So mtp=2 with it holds only the checkpoint's one MTP layer, model.layers.2, where mtp=2
// without it asks for a second layer the checkpoint lacks. A layout string still places
// mtp_num_layers 'm's (validate_layer_layout counts them against mtp_num_layers).
TEST(MtpLayoutTest, MegatronRepeatedMtpLayerHoldsOneLayer) {
  ModelPreset p = PresetOf(TinyDeepseekWithMtp(true));
  Layout l = Build(p, "megatron:tp=2,pp=2,vocab_divisible_by=32,mtp=2,mtp_repeated=1");
  for (int rank : {2, 3}) {
    auto eh = FragmentsIn(l, rank, "mtp.layers.0.eh_proj.weight", "model.layers.2.eh_proj.weight");
    ASSERT_EQ(eh.size(), 1u) << rank;
    EXPECT_EQ(eh[0].box.lo[0], (rank - 2) * 4);  // ColumnParallelLinear: 4 of the 8 output rows
    EXPECT_EQ(l.FindBuffer(rank, "mtp.layers.1.eh_proj.weight"), -1) << rank;
  }
  EXPECT_EQ(l.FindTensor("model.layers.3.eh_proj.weight"), -1);
  Layout laid = Build(p, "megatron:pp=2,vocab_divisible_by=64,mtp=2,mtp_repeated=1,layout=Et|tmmL");
  EXPECT_GE(laid.FindBuffer(1, "mtp.layers.0.enorm.weight"), 0);
  EXPECT_EQ(laid.FindBuffer(1, "mtp.layers.1.enorm.weight"), -1);
  Result<Layout> one_m =
      BuildFrameworkLayout(p, Spec("megatron:pp=2,mtp=2,mtp_repeated=1,layout=Et|tmL"));
  ASSERT_FALSE(one_m.ok());
  EXPECT_TRUE(Says(one_m.status(), "Number of mtp layers in layout must match mtp_num_layers"));
  EXPECT_TRUE(Says(BuildFrameworkLayout(p, Spec("megatron:pp=2,mtp=2")).status(),
                   "has 1 multi-token prediction layer(s)"));
  EXPECT_TRUE(Says(BuildFrameworkLayout(p, Spec("megatron:mtp_repeated=1")).status(),
                   "mtp_repeated=1 without mtp=N"));
  EXPECT_EQ(Spec("megatron:mtp=2,mtp_repeated=1").ToString(),
            "megatron:tp=1,pp=1,ep=1,cp=1,mtp=2,mtp_repeated=1");
  // A refit into vLLM's drafter, which holds the checkpoint's one MTP layer (deepseek_mtp.py
  // cycles its layers over the speculative steps, spec_step_idx % num_mtp_layers).
  EXPECT_TRUE(BuildRefitLayouts(p, Spec("megatron:tp=2,mtp=2,mtp_repeated=1"), Spec("vllm:tp=2,mtp=1"))
                  .ok());
}

TEST(MtpLayoutTest, WithoutMtpTheLayoutsHaveNone) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  for (const char* spec : {"megatron:tp=2,pp=2,first=31", "vllm:tp=2"}) {
    Result<Layout> l = BuildFrameworkLayout(ds, Spec(spec));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->FindTensor("model.layers.61.eh_proj.weight"), -1) << spec;
    EXPECT_EQ(Spec(spec).ToString().find("mtp"), std::string::npos);
  }
  EXPECT_EQ(Spec("megatron:mtp=1").ToString(), "megatron:tp=1,pp=1,ep=1,cp=1,mtp=1");
  EXPECT_EQ(Spec("vllm:mtp=1").ToString(), "vllm:tp=1,dp=1,ep=1,mtp=1");
}

TEST(MtpLayoutTest, RejectedAsTheFrameworksWould) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  auto rejects = [](const ModelPreset& p, const std::string& spec, const std::string& why) {
    Result<Layout> l = BuildFrameworkLayout(p, Spec(spec));
    ASSERT_FALSE(l.ok()) << spec;
    EXPECT_TRUE(Says(l.status(), why)) << spec << ": " << l.status().ToString();
  };
  rejects(Preset("llama-3.1-8b", 1.0 / 64), "megatron:mtp=1",
          "has no multi-token prediction layers (its config's num_nextn_predict_layers is 0)");
  rejects(Preset("kimi-k2", 1.0 / 64), "vllm:mtp=1", "num_nextn_predict_layers is 0");
  rejects(ds, "megatron:pp=2,first=31,mtp=2", "has 1 multi-token prediction layer(s)");
  rejects(ds, "megatron:pp=2,mtp=1,layout=Et*30|t*31L",
          "Number of mtp layers in layout must match mtp_num_layers");
  rejects(ds, "megatron:pp=2,mtp=1,layout=Et*30m|t*31L",
          "decoder layers must be placed before MTP layers");
  EXPECT_FALSE(ParseFrameworkSpec("megatron:mtp=-1").ok());
}

TEST(MtpLayoutTest, ExplainNamesTheMtpRules) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  const FrameworkSpec megatron = ResolveFrameworkSpec(Spec("megatron:tp=2,pp=2,first=31,mtp=1"),
                                                      ds.config()).value();
  Layout l = BuildFrameworkLayout(ds, megatron).value();
  std::string text = ExplainTensor(ds.config(), megatron, l, "model.layers.61.eh_proj.weight").value();
  EXPECT_NE(text.find("rank 2  mtp.layers.0.eh_proj.weight  [0:56, 0:224)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("megatron/core/transformer/multi_token_prediction.py"), std::string::npos);
  EXPECT_NE(text.find("src/megatron/bridge/models/deepseek/common.py"), std::string::npos);
  const FrameworkSpec vllm = ResolveFrameworkSpec(Spec("vllm:tp=2,mtp=1"), ds.config()).value();
  Layout v = BuildFrameworkLayout(ds, vllm).value();
  text = ExplainTensor(ds.config(), vllm, v, "model.layers.61.eh_proj.weight").value();
  EXPECT_NE(text.find("rank 1  model.layers.61.eh_proj.weight  [0:112, 0:224)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm/model_executor/models/deepseek_mtp.py"), std::string::npos);
}

}  // namespace
}  // namespace ferry::models
