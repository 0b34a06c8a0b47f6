// Tests for tools/models/sglang_layout (through BuildFrameworkLayout): fragments of SGLang layouts
// worked by hand from SGLang 0.5.23's python/sglang/srt (layers/linear.py QKVParallelLinear,
// runtime_context.py derive_attention_ranks, layers/vocab_parallel_embedding.py,
// layers/moe/fused_moe_triton/layer.py FusedMoE, eplb/expert_location.py init_trivial,
// models/deepseek_v2.py), exact coverage of every tensor, and the specs SGLang or ferry refuses.
#include "tools/models/sglang_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/layout_explain.h"

namespace ferry::models {
namespace {

bool Contains(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

// Qwen3-30B-A3B at 1/64: hidden 32, 32 heads and 4 KV heads of head_dim 2, 128 experts of FFN 16,
// vocabulary 2384. tp=4 with attn_dp=2: attention groups {0,1} and {2,3}; ep=2: moe_tp = 2.
TEST(SglangLayoutTest, AttentionDpGroupsAndExpertParallelShards) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  ASSERT_EQ(p.config().vocab, 2384);
  Layout l = Build(p, "sglang:tp=4,attn_dp=2,ep=2");
  EXPECT_EQ(l.Ranks(), (std::vector<int>{0, 1, 2, 3}));
  ExpectCoverage(l, p, [](const std::string& n) {
    if (IsExpert(n) || Contains(n, "lm_head")) return 1;
    if (Contains(n, "_proj") || Contains(n, "embed")) return 2;  // once per attention group
    return 4;                                                    // norms, router: every rank
  });
  // The older spelling --dp-size 2 --enable-dp-attention is the same server.
  Layout old = Build(p, "sglang:tp=4,dp=2,dp_attention=yes,ep=2");
  EXPECT_EQ(old.fragments.size(), l.fragments.size());
  const FrameworkSpec resolved =
      ResolveFrameworkSpec(Spec("sglang:tp=4,dp=2,dp_attention=yes,ep=2"), p.config()).value();
  EXPECT_EQ(resolved.ToString(), "sglang:tp=4,dp=1,attn_dp=2,ep=2");
  const std::string qkv = "model.layers.3.self_attn.qkv_proj.weight";
  const int64_t row = 32 * 2;  // bytes of a row
  for (int rank : {1, 3}) {    // attention rank 1 of its group: heads 16..31, KV heads 2..3
    auto q = FragmentsIn(l, rank, qkv, "model.layers.3.self_attn.q_proj.weight");
    auto k = FragmentsIn(l, rank, qkv, "model.layers.3.self_attn.k_proj.weight");
    auto v = FragmentsIn(l, rank, qkv, "model.layers.3.self_attn.v_proj.weight");
    ASSERT_EQ(q.size(), 1u);
    ASSERT_EQ(k.size(), 1u);
    EXPECT_EQ(q[0].box.lo[0], 32);
    EXPECT_EQ(q[0].box.hi[0], 64);
    EXPECT_EQ(k[0].box.lo[0], 4);
    EXPECT_EQ(k[0].box.hi[0], 8);
    EXPECT_EQ(k[0].loc.byte_offset, 32 * row);
    EXPECT_EQ(v[0].loc.byte_offset, 36 * row);
  }
  // embed_tokens over each attention group (2432 padded rows, 1216 a rank); lm_head over all four
  // (608 a rank).
  auto embed = FragmentsIn(l, 3, "model.embed_tokens.weight", "model.embed_tokens.weight");
  ASSERT_EQ(embed.size(), 1u);
  EXPECT_EQ(embed[0].box.lo[0], 1216);
  EXPECT_EQ(embed[0].box.hi[0], 2384);
  EXPECT_EQ(l.buffers[l.FindBuffer(3, "model.embed_tokens.weight")].bytes, 1216 * row);
  auto head = FragmentsIn(l, 3, "lm_head.weight", "lm_head.weight");
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].box.lo[0], 3 * 608);
  // Rank 3: EP rank 1 (experts 64..127), FFN rows 8..15. Expert 69 is local expert 5.
  const std::string w13 = "model.layers.7.mlp.experts.w13_weight";
  auto gate = FragmentsIn(l, 3, w13, "model.layers.7.mlp.experts.69.gate_proj.weight");
  auto up = FragmentsIn(l, 3, w13, "model.layers.7.mlp.experts.69.up_proj.weight");
  ASSERT_EQ(gate.size(), 1u);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 8);
  EXPECT_EQ(gate[0].box.hi[0], 16);
  EXPECT_EQ(gate[0].loc.byte_offset, 5 * (2 * 8 * 32) * 2);
  EXPECT_EQ(up[0].loc.byte_offset, (5 * 2 * 8 * 32 + 8 * 32) * 2);
  EXPECT_EQ(l.buffers[l.FindBuffer(3, w13)].bytes, 64 * 2 * 8 * 32 * 2);
  EXPECT_TRUE(FragmentsIn(l, 1, w13, "model.layers.7.mlp.experts.69.gate_proj.weight").empty());
}

// DeepSeek-V3 at 1/64 (hidden 112, 256 experts of FFN 32, one shared expert): over tp=4 SGLang
// fuses the shared expert after the 256 routed ones on every rank, FFN shard tp_rank (8 rows).
TEST(SglangLayoutTest, DeepseekSharedExpertFusedAsExpert256) {
  ModelPreset p = Preset("deepseek-v3", 1.0 / 64);
  ASSERT_EQ(p.config().moe_intermediate, 32);
  Layout fused = Build(p, "sglang:tp=4");
  EXPECT_EQ(Spec("sglang:tp=4").ToString(), "sglang:tp=4,dp=1,ep=1");
  ExpectCoverage(fused, p, Copies(1, 4, 1));
  const std::string w13 = "model.layers.5.mlp.experts.w13_weight";
  const std::string w2 = "model.layers.5.mlp.experts.w2_weight";
  const int64_t expert13 = 2 * 8 * 112 * 2, expert2 = 112 * 8 * 2;  // bytes of one local expert
  auto gate = FragmentsIn(fused, 2, w13, "model.layers.5.mlp.shared_experts.gate_proj.weight");
  auto up = FragmentsIn(fused, 2, w13, "model.layers.5.mlp.shared_experts.up_proj.weight");
  auto down = FragmentsIn(fused, 2, w2, "model.layers.5.mlp.shared_experts.down_proj.weight");
  ASSERT_EQ(gate.size(), 1u);
  ASSERT_EQ(up.size(), 1u);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 16);
  EXPECT_EQ(gate[0].box.hi[0], 24);
  EXPECT_EQ(gate[0].loc.byte_offset, 256 * expert13);
  EXPECT_EQ(up[0].loc.byte_offset, 256 * expert13 + 8 * 112 * 2);
  EXPECT_EQ(down[0].box.lo[1], 16);
  EXPECT_EQ(down[0].box.hi[1], 24);
  EXPECT_EQ(down[0].loc.byte_offset, 256 * expert2);
  EXPECT_EQ(fused.buffers[fused.FindBuffer(2, w13)].bytes, 257 * expert13);
  EXPECT_LT(fused.FindBuffer(2, "model.layers.5.mlp.shared_experts.gate_up_proj.weight"), 0);
  // --disable-shared-experts-fusion: a gate_up_proj of its own over all four ranks.
  Layout separate = Build(p, "sglang:tp=4,shared_experts=separate");
  ExpectCoverage(separate, p, Copies(1, 4, 1));
  const std::string gate_up = "model.layers.5.mlp.shared_experts.gate_up_proj.weight";
  auto own = FragmentsIn(separate, 2, gate_up, "model.layers.5.mlp.shared_experts.up_proj.weight");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].box.lo[0], 16);
  EXPECT_EQ(own[0].loc.byte_offset, 8 * 112 * 2);
  EXPECT_EQ(separate.buffers[separate.FindBuffer(2, w13)].bytes, 256 * expert13);
  // MLA: fused_qkv_a_proj_with_mqa = [q_a_proj; kv_a_proj_with_mqa] on every rank.
  auto kv_a = FragmentsIn(fused, 1, "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight",
                          "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kv_a.size(), 1u);
  EXPECT_EQ(kv_a[0].loc.byte_offset, p.config().q_lora_rank * 112 * 2);
}

// --moe-dense-tp-size 1 puts DeepSeek's dense MLPs whole on every rank; --enable-dp-lm-head splits
// lm_head over each attention group ({0,1}, {2,3}) instead of all four ranks.
TEST(SglangLayoutTest, DenseMlpWholeAndLmHeadOverTheAttentionGroup) {
  ModelPreset p = Preset("deepseek-v3", 1.0 / 64);
  Layout l = Build(p, "sglang:tp=4,attn_dp=2,dense_tp=1,dp_lm_head=yes");
  const ModelConfig& c = p.config();
  ASSERT_EQ(c.vocab, 2032);
  auto down = FragmentsIn(l, 3, "model.layers.0.mlp.down_proj.weight",
                          "model.layers.0.mlp.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].box.hi[1], c.intermediate);
  auto up = FragmentsIn(l, 3, "model.layers.0.mlp.gate_up_proj.weight",
                        "model.layers.0.mlp.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].loc.byte_offset, c.intermediate * c.hidden * 2);
  for (int rank : {1, 3}) {
    auto head = FragmentsIn(l, rank, "lm_head.weight", "lm_head.weight");
    ASSERT_EQ(head.size(), 1u);
    EXPECT_EQ(head[0].box.lo[0], 1024);  // 2032 rows padded to 2048, halved
  }
  ExpectCoverage(l, p, [](const std::string& n) {
    if (IsExpert(n) || Contains(n, "shared_experts")) return 1;
    if (Contains(n, "lm_head") || Contains(n, "embed")) return 2;
    if (Contains(n, "self_attn.") && !TpReplicated(n)) return 2;
    return 4;
  });
}

// --ep-num-redundant-experts 4 over ep=4: 132 physical experts, 33 a rank. Rank 3 holds physical
// 99..131: logical 99..127, then 0..3 (physical 128 + j replicates logical j).
TEST(SglangLayoutTest, RedundantExpertsReplicateTheFirstLogicalOnes) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  Layout l = Build(p, "sglang:tp=4,ep=4,redundant=4");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (!IsExpert(n)) return TpReplicated(n) ? 4 : 1;
    for (const char* e : {".experts.0.", ".experts.1.", ".experts.2.", ".experts.3."}) {
      if (Contains(n, e)) return 2;
    }
    return 1;
  });
  const std::string w13 = "model.layers.2.mlp.experts.w13_weight";
  const int64_t expert13 = 2 * 16 * 32 * 2;
  auto zero = FragmentsIn(l, 3, w13, "model.layers.2.mlp.experts.0.gate_proj.weight");
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].loc.byte_offset, 29 * expert13);
  auto last = FragmentsIn(l, 3, w13, "model.layers.2.mlp.experts.127.gate_proj.weight");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].loc.byte_offset, 28 * expert13);
  EXPECT_EQ(l.buffers[l.FindBuffer(3, w13)].bytes, 33 * expert13);
}

// --dp-size 2 is two copies of the server on the next ranks each; attention DP adds no ranks.
TEST(SglangLayoutTest, DpReplicasWithoutDpAttentionAreCopiesOnTheNextRanks) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = Build(p, "sglang:tp=2,dp=2", 8);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(NumRanks(Spec("sglang:tp=2,dp=2,engines=3")), 12);
  EXPECT_EQ(NumRanks(Spec("sglang:tp=8,dp=4,dp_attention=yes,engines=3")), 24);
  EXPECT_EQ(NumRanks(Spec("sglang:tp=8,dp=2,attn_dp=4")), 16);
  const std::string text =
      "sglang:tp=8,dp=2,attn_dp=8,ep=8,redundant=8,engines=2,dp_lm_head=yes,"
      "shared_experts=separate,expert_tensors=members";
  EXPECT_EQ(Spec(text).ToString(), text);
  EXPECT_EQ(Spec(Spec(text).ToString()).ToString(), text);
  ExpectCoverage(l, p, Copies(2, 2, 0));
  const std::string qkv = "model.layers.5.self_attn.qkv_proj.weight";
  auto k9 = FragmentsIn(l, 9, qkv, "model.layers.5.self_attn.k_proj.weight");
  auto k11 = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.k_proj.weight");
  ASSERT_EQ(k9.size(), 1u);
  ASSERT_EQ(k11.size(), 1u);
  EXPECT_EQ(k11[0].box, k9[0].box);
  EXPECT_EQ(k11[0].loc.byte_offset, k9[0].loc.byte_offset);
}

// --moe-a2a-backend deepep: expert parallelism over all tp ranks whatever --ep-size says
// (arg_groups/overrides.py _a2a_ep_size), the shared expert whole on every rank
// (models/deepseek_v2.py: parallel_group "replicated" under the all-to-all backends) and unfused
// by default (shared_experts_fusion_disable_reason: "DeepEP: fusion off by default").
TEST(SglangLayoutTest, AllToAllBackendReplicatesTheSharedExpert) {
  ModelPreset p = Preset("deepseek-v3", 1.0 / 64);
  ASSERT_EQ(p.config().moe_intermediate, 32);
  ASSERT_EQ(p.config().hidden, 112);
  const FrameworkSpec resolved =
      ResolveFrameworkSpec(Spec("sglang:tp=4,ep=2,a2a=deepep"), p.config()).value();
  EXPECT_EQ(resolved.ToString(), "sglang:tp=4,dp=1,ep=4,shared_experts=separate,a2a=deepep");
  Layout l = Build(p, "sglang:tp=4,a2a=deepep");
  ExpectCoverage(l, p, [](const std::string& n) {
    if (Contains(n, "shared_experts")) return 4;  // whole on each rank
    if (IsExpert(n) || Contains(n, "lm_head") || Contains(n, "embed")) return 1;
    return Contains(n, "norm") || Contains(n, "mlp.gate.") || Contains(n, "_a_proj") ? 4 : 1;
  });
  const std::string gate_up = "model.layers.5.mlp.shared_experts.gate_up_proj.weight";
  auto up = FragmentsIn(l, 3, gate_up, "model.layers.5.mlp.shared_experts.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 0);
  EXPECT_EQ(up[0].box.hi[0], 32);
  EXPECT_EQ(up[0].loc.byte_offset, 32 * 112 * 2);  // after the whole gate_proj
  EXPECT_EQ(l.buffers[l.FindBuffer(3, gate_up)].bytes, 2 * 32 * 112 * 2);
  // EP rank 3 of 4: routed experts 192..255, each whole (moe_tp 1)
  const std::string w13 = "model.layers.5.mlp.experts.w13_weight";
  EXPECT_EQ(FragmentsIn(l, 3, w13, "model.layers.5.mlp.experts.192.gate_proj.weight").size(), 1u);
  EXPECT_TRUE(FragmentsIn(l, 3, w13, "model.layers.5.mlp.experts.191.gate_proj.weight").empty());
  // One rank: no expert parallelism, still no fusion by default (SGLang's default without a2a
  // fuses DeepSeek-V3's shared expert).
  EXPECT_EQ(ResolveFrameworkSpec(Spec("sglang:tp=1,a2a=mooncake"), p.config())->ToString(),
            "sglang:tp=1,dp=1,ep=1,shared_experts=separate,a2a=mooncake");
  EXPECT_EQ(ResolveFrameworkSpec(Spec("sglang:tp=1"), p.config())->ToString(),
            "sglang:tp=1,dp=1,ep=1,shared_experts=fused");
  // Redundant experts need expert parallelism, which the backend gives.
  EXPECT_TRUE(ResolveFrameworkSpec(Spec("sglang:tp=4,a2a=deepep,redundant=4"), p.config()).ok());
}

// Attention DP of dense models, by model class: models/llama.py keeps attention and embed_tokens
// on the TP group and splits lm_head over the attention group with --enable-dp-lm-head;
// models/qwen2.py keeps attention and lm_head on the TP group but splits embed_tokens
// (Qwen2Model, use_attn_tp_group=is_dp_attention_enabled()); models/qwen3.py splits all three.
TEST(SglangLayoutTest, AttentionDpOfDenseModelsFollowsTheModelClass) {
  ModelPreset llama = Preset("llama-3.1-8b", 1.0 / 64);  // 32 heads of 2, vocabulary 2016
  ASSERT_EQ(llama.config().head_dim, 2);
  ASSERT_EQ(llama.config().vocab, 2016);
  Layout l = Build(llama, "sglang:tp=4,attn_dp=2,dp_lm_head=yes");
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  auto q3 = FragmentsIn(l, 3, "model.layers.0.self_attn.qkv_proj.weight", q);
  ASSERT_EQ(q3.size(), 1u);
  EXPECT_EQ(q3[0].box.lo[0], 24 * 2);  // TP rank 3 of 4, not of its group of 2: heads 24..31
  auto embed = FragmentsIn(l, 3, "model.embed_tokens.weight", "model.embed_tokens.weight");
  auto head = FragmentsIn(l, 3, "lm_head.weight", "lm_head.weight");
  ASSERT_EQ(embed.size(), 1u);
  ASSERT_EQ(head.size(), 1u);
  // 2016 rows padded to 2048: embed_tokens in 4 blocks of 512 (TP rank 3: 1536..), lm_head in
  // 2 blocks of 1024 over each attention group (rank 3 is rank 1 of {2, 3}: 1024..)
  EXPECT_EQ(embed[0].box.lo[0], 1536);
  EXPECT_EQ(head[0].box.lo[0], 1024);
  const SglangAttentionDpSplit qwen2 = SglangAttentionDpSplitOf([] {
    ModelConfig c;
    c.qkv_bias = true;
    return c;
  }());
  EXPECT_FALSE(qwen2.attention);
  EXPECT_TRUE(qwen2.embed_tokens);
  EXPECT_FALSE(qwen2.lm_head);
  ModelConfig qwen3;
  qwen3.qk_norm = true;
  const SglangAttentionDpSplit q3s = SglangAttentionDpSplitOf(qwen3);
  EXPECT_TRUE(q3s.attention && q3s.embed_tokens && q3s.lm_head);
}

// `ferry layout --explain` names SGLang's rules and files, not another framework's.
TEST(SglangLayoutTest, ExplainCitesSglang) {
  ModelPreset p = Preset("deepseek-v3", 1.0 / 64);
  const FrameworkSpec r = ResolveFrameworkSpec(Spec("sglang:tp=4,attn_dp=2"), p.config()).value();
  const std::vector<LayoutRule> embed = RulesForTensor(p.config(), r, "model.embed_tokens.weight");
  ASSERT_GE(embed.size(), 2u);
  EXPECT_NE(embed[1].rule.find("embed_tokens split over each attention group of 2 ranks"),
            std::string::npos);
  const std::vector<LayoutRule> shared =
      RulesForTensor(p.config(), r, "model.layers.5.mlp.shared_experts.gate_proj.weight");
  ASSERT_GE(shared.size(), 2u);
  EXPECT_NE(shared[1].rule.find("follows the rank's routed experts"), std::string::npos);
  for (const LayoutRule& rule : shared) {
    EXPECT_EQ(rule.upstream.rfind("sgl-project/sglang v0.5.23 ", 0), 0u) << rule.upstream;
  }
}

// What SGLang asserts, and what ferry does not model, each refused with its reason.
TEST(SglangLayoutTest, RefusesWhatSglangOrFerryDoesNot) {
  ModelPreset qwen = Preset("qwen3-30b-a3b", 1.0 / 64);
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  ModelPreset llama = Preset("llama-3.1-8b", 1.0 / 64);
  const struct {
    const ModelPreset* preset;
    const char* spec;
    const char* reason;
  } cases[] = {
      {&qwen, "sglang:tp=4,dp=3,dp_attention=yes", "tp 4 is not divisible by attn_dp 3"},
      {&qwen, "sglang:tp=4,dp=2,dp_attention=yes,attn_dp=2", "give one of them"},
      {&qwen, "sglang:tp=4,ep=3", "tp 4 is not divisible by ep 3"},
      {&qwen, "sglang:tp=4,ep=4,redundant=2", "routed experts (with redundant ones) 130"},
      {&qwen, "sglang:tp=4,redundant=4", "redundant experts with ep > 1 only"},
      {&qwen, "sglang:tp=4,dp_lm_head=yes", "requires attention DP"},
      {&qwen, "sglang:tp=4,shared_experts=fused", "has no shared expert"},
      {&llama, "sglang:tp=4,ep=2", "the model has no experts"},
      {&ds, "sglang:tp=4,ep=4,shared_experts=fused", "under expert parallelism only on AMD"},
      {&ds, "sglang:tp=4,dense_tp=2", "only supports None, 1, or tp_size"},
      {&qwen, "sglang:tp=4,dense_tp=1", "applies to DeepSeek's dense layers"},
      {&llama, "sglang:tp=4,a2a=deepep", "has no experts"},
  };
  for (const auto& c : cases) {
    Result<FrameworkSpec> spec = ParseFrameworkSpec(c.spec);
    ASSERT_TRUE(spec.ok()) << c.spec << ": " << spec.status().message();
    Result<Layout> l = BuildFrameworkLayout(*c.preset, *spec);
    ASSERT_FALSE(l.ok()) << c.spec;
    EXPECT_NE(l.status().message().find(c.reason), std::string::npos)
        << c.spec << ": " << l.status().message();
  }
  EXPECT_FALSE(ParseFrameworkSpec("sglang:tp=4,shared_experts=maybe").ok());
  EXPECT_FALSE(ParseFrameworkSpec("sglang:tp=4,a2a=flashinfer").ok());
  EXPECT_FALSE(ParseFrameworkSpec("sglang:tp=4,placement=round_robin").ok());
}

}  // namespace
}  // namespace ferry::models
