// SGLang's FP8 block-quantized servers (sglang:...,quant=fp8_block; tools/models/
// fp8_block_weights.h with Fp8Engine::kSglang), hand-worked from SGLang 0.5.23's
// python/sglang/srt/layers/quantization/fp8.py: Fp8LinearMethod.create_fp8_weight_ (fp8 e4m3
// `weight` [out/tp, in/tp], float32 `weight_scale_inv` [ceil(out/tp / 128), ceil(in/tp / 128)])
// and Fp8MoEMethod.create_weights (`w13_weight_scale_inv` [experts, 2 * ceil(I/128), ceil(H/128)],
// `w2_weight_scale_inv` [experts, ceil(H/128), ceil(I/128)] of a rank's FFN shard I), and
// models/deepseek_v2.py / deepseek_nextn.py for which modules take the quant_config.
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/sglang_explain.h"

namespace ferry::models {
namespace {

// DeepSeek-V3's shapes in whole blocks (BlockAlignedDeepseek) with its 256 routed experts, whose
// shared expert SGLang fuses after them on every rank.
ModelConfig Deepseek(int64_t q_lora_rank) { return BlockAlignedDeepseek(256, q_lora_rank); }

const std::string kAttn = "model.layers.0.self_attn.";

TEST(SglangFp8WeightsTest, MlaProjectionsInFp8WithFloat32Scales) {
  Layout l = Build(PresetOf(Deepseek(128)), "sglang:tp=2,quant=fp8_block");
  // fused_qkv_a_proj_with_mqa, a ReplicatedLinear of [q_a 128; kv_a 128 + 64] rows over 256
  // columns on every rank: ceil(320/128) x 2 scales; kv_a's rows follow q_a's 128 * 256 bytes.
  EXPECT_EQ(BytesOf(l, 1, kAttn + "fused_qkv_a_proj_with_mqa.weight"), 320 * 256);
  EXPECT_EQ(BytesOf(l, 1, kAttn + "fused_qkv_a_proj_with_mqa.weight_scale_inv"), 3 * 2 * 4);
  auto kv_a = FragmentsIn(l, 1, kAttn + "fused_qkv_a_proj_with_mqa.weight",
                          kAttn + "kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kv_a.size(), 1u);
  EXPECT_EQ(kv_a[0].loc.byte_offset, 128 * 256);
  // q_b_proj: 2 heads x (64 + 64) rows of 128; kv_b_proj: 2 x (64 + 64) of 128; o_proj: 256 rows
  // of the rank's 2 x 64 columns. Each 2 x 1 blocks.
  for (const char* proj : {"q_b_proj", "kv_b_proj", "o_proj"}) {
    EXPECT_EQ(BytesOf(l, 1, kAttn + proj + ".weight"), 256 * 128) << proj;
    EXPECT_EQ(BytesOf(l, 1, kAttn + proj + ".weight_scale_inv"), 2 * 1 * 4) << proj;
  }
  // The dense layer's gate_up_proj [2 x 256, 256] and down_proj [256, 256].
  EXPECT_EQ(BytesOf(l, 0, "model.layers.0.mlp.gate_up_proj.weight_scale_inv"), 4 * 2 * 4);
  EXPECT_EQ(BytesOf(l, 0, "model.layers.0.mlp.down_proj.weight_scale_inv"), 2 * 2 * 4);
  // The norms, MLA's kv_a_layernorm and the embedding keep the model's dtype, without scales.
  EXPECT_EQ(DTypeOf(l, kAttn + "kv_a_layernorm.weight"), DType::kBF16);
  EXPECT_EQ(DTypeOf(l, "model.embed_tokens.weight"), DType::kBF16);
  EXPECT_EQ(BytesOf(l, 0, "model.embed_tokens.weight_scale_inv"), -1);
  EXPECT_EQ(DTypeOf(l, kAttn + "q_b_proj.weight"), DType::kFP8E4M3);
  for (const BlockScaledBuffer& s : l.block_scaled) {
    EXPECT_EQ(s.scale_fmt, Fp8ScaleFormat::kFloat32);
  }
}

TEST(SglangFp8WeightsTest, ExpertsWithTheFusedSharedExpertPerSlot) {
  Layout l = Build(PresetOf(Deepseek(128)), "sglang:tp=2,quant=fp8_block");
  const std::string experts = "model.layers.1.mlp.experts.";
  // 256 routed experts and the shared one in slot 256, each FFN shard 128 rows of 256 columns:
  // w13 [257, 2 x 128, 256] with 257 x (2 x 1) x 2 scales, w2 [257, 256, 128] with 257 x 2 x 1.
  EXPECT_EQ(BytesOf(l, 1, experts + "w13_weight"), 257 * 256 * 256);
  EXPECT_EQ(BytesOf(l, 1, experts + "w13_weight_scale_inv"), 257 * 2 * 2 * 4);
  EXPECT_EQ(BytesOf(l, 1, experts + "w2_weight_scale_inv"), 257 * 2 * 1 * 4);
  auto shared_up = FragmentsIn(l, 1, experts + "w13_weight",
                               "model.layers.1.mlp.shared_experts.up_proj.weight");
  ASSERT_EQ(shared_up.size(), 1u);
  EXPECT_EQ(shared_up[0].loc.byte_offset, 256 * 256 * 256 + 128 * 256);
  int stacks = 0;
  for (const BlockScaledBuffer& s : l.block_scaled) {
    if (s.matrices > 1) {
      EXPECT_EQ(s.matrices, 257);
      ++stacks;
    }
  }
  EXPECT_EQ(stacks, 2 * 2);  // w13 and w2 on each rank
  // The router (MoEGate, a plain parameter) and its bias keep their dtypes.
  EXPECT_EQ(DTypeOf(l, "model.layers.1.mlp.gate.weight"), DType::kBF16);
  EXPECT_EQ(DTypeOf(l, "model.layers.1.mlp.gate.e_score_correction_bias"), DType::kFP32);
}

TEST(SglangFp8WeightsTest, NextnDraftsDecoderInFp8ItsEhProjNot) {
  // deepseek_nextn.py: eh_proj is an nn.Linear for fp8 checkpoints; its decoder layer takes the
  // quant_config.
  Layout l = Build(PresetOf(Deepseek(128)), "sglang:tp=2,mtp=1,quant=fp8_block");
  EXPECT_EQ(BytesOf(l, 0, "model.eh_proj.weight"), 256 * 512 * 2);
  EXPECT_EQ(BytesOf(l, 0, "model.eh_proj.weight_scale_inv"), -1);
  EXPECT_EQ(BytesOf(l, 0, "model.decoder.self_attn.o_proj.weight_scale_inv"), 2 * 1 * 4);
  EXPECT_EQ(BytesOf(l, 0, "model.decoder.mlp.experts.w13_weight_scale_inv"), 257 * 2 * 2 * 4);
}

TEST(SglangFp8WeightsTest, QaProjInPartialBlocksCannotBeLoaded) {
  // q_lora_rank 192: the loader's concatenated scales (2 + 2 rows) do not fit the fused
  // parameter's ceil(384/128) = 3.
  Result<Layout> l =
      BuildFrameworkLayout(PresetOf(Deepseek(192)), Spec("sglang:tp=2,quant=fp8_block"));
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(Says(l.status(), "SGLang cannot load it")) << l.status().ToString();
  EXPECT_TRUE(Says(l.status(), "self_attn.q_a_proj.weight (192 rows")) << l.status().ToString();
  // Without quantization the same model lays out.
  EXPECT_TRUE(BuildFrameworkLayout(PresetOf(Deepseek(192)), Spec("sglang:tp=2")).ok());
}

TEST(SglangFp8WeightsTest, RejectedAsSglangRejectsIt) {
  // Llama's FFN 384 over tp 2: gate_up_proj's output partitions of 192 rows.
  ModelConfig c = OneLayerConfig("one-layer", ModelFamily::kLlama, 256, 2, 1, 128, 512);
  c.intermediate = 384;
  Result<Layout> l = BuildFrameworkLayout(PresetOf(c), Spec("sglang:tp=2,quant=fp8_block"));
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(Says(l.status(), "SGLang rejects it: Weight output_partition_size = 192 is not "
                               "divisible by weight quantization block_n = 128."))
      << l.status().ToString();
}

TEST(SglangFp8WeightsTest, ExplainedWithSglangsFile) {
  SglangParallel s;
  s.tp = 2;
  s.fp8_block_weights = true;
  auto cites_fp8 = [&](const std::string& tensor) {
    for (const LayoutRule& r : SglangRulesForTensor(Deepseek(128), s, tensor)) {
      if (r.rule.find("quant=fp8_block") != std::string::npos) {
        return r.upstream.find("layers/quantization/fp8.py") != std::string::npos;
      }
    }
    return false;
  };
  EXPECT_TRUE(cites_fp8("model.layers.0.self_attn.o_proj.weight"));
  EXPECT_FALSE(cites_fp8("model.layers.1.mlp.gate.weight"));
}

TEST(SglangFp8WeightsTest, SpecKeyParsedAndPrinted) {
  Result<FrameworkSpec> spec = ParseFrameworkSpec("sglang:tp=2,quant=fp8_block");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->sglang.fp8_block_weights);
  EXPECT_EQ(spec->ToString(), "sglang:tp=2,dp=1,ep=1,quant=fp8_block");
  EXPECT_FALSE(ParseFrameworkSpec("sglang:tp=2,quant=fp8").ok());
  EXPECT_FALSE(ParseFrameworkSpec("sglang:tp=2,quant=fp8_block,scale_fmt=ue8m0").ok());
}

}  // namespace
}  // namespace ferry::models
