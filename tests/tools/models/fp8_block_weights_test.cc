// vLLM's FP8 block-quantized weights (tools/models/fp8_block_weights), hand-worked from
// vllm/model_executor/layers/quantization/fp8.py (weight_scale_inv of
// [ceil(out/128), ceil(in/128)] fp32 per partition, fp8 e4m3 weights) and
// vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape, for one
// decoder layer: hidden 256, 2 heads and 1 KV head of 128, FFN 512, over vLLM tp=2.
#include "tools/models/fp8_block_weights.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/plan/plan.h"
#include "planner/planner.h"
#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

ModelConfig OneLayer(int64_t intermediate) {
  ModelConfig c = OneLayerConfig("one-layer", ModelFamily::kLlama, 256, 2, 1, 128, 512);
  c.intermediate = intermediate;
  return c;
}

// The same layer with 4 routed experts of FFN `moe_intermediate` instead of the MLP.
ModelPreset OneMoeLayer(int64_t moe_intermediate) {
  ModelConfig c = OneLayer(512);
  c.family = ModelFamily::kQwen3Moe;
  c.num_experts = 4;
  c.moe_intermediate = moe_intermediate;
  return PresetOf(c);
}

const std::string kLayer = "model.layers.0.";

TEST(Fp8BlockWeightsTest, ProjectionsInFp8WithBlockScales) {
  ModelPreset p = PresetOf(OneLayer(512));
  Layout l = Build(p, "vllm:tp=2,quant=fp8_block");
  // qkv_proj per rank: q 128 rows, the replicated KV head's k and v 128 each, of 256 columns: one
  // byte an element, k after q's 128 * 256; scales ceil(384/128) x ceil(256/128) = 3 x 2 fp32.
  EXPECT_EQ(BytesOf(l, 1, kLayer + "self_attn.qkv_proj.weight"), 384 * 256);
  EXPECT_EQ(BytesOf(l, 1, kLayer + "self_attn.qkv_proj.weight_scale_inv"), 3 * 2 * 4);
  auto k = FragmentsIn(l, 1, kLayer + "self_attn.qkv_proj.weight", kLayer + "self_attn.k_proj.weight");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].loc.byte_offset, 128 * 256);
  // o_proj row-parallel [256, 128]: 2 x 1 blocks; gate_up [2 * 256, 256]: 4 x 2; down [256, 256].
  EXPECT_EQ(BytesOf(l, 0, kLayer + "self_attn.o_proj.weight_scale_inv"), 2 * 1 * 4);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "mlp.gate_up_proj.weight"), 512 * 256);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "mlp.gate_up_proj.weight_scale_inv"), 4 * 2 * 4);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "mlp.down_proj.weight_scale_inv"), 2 * 2 * 4);
  auto up = FragmentsIn(l, 0, kLayer + "mlp.gate_up_proj.weight", kLayer + "mlp.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].loc.byte_offset, 256 * 256);
  // Marked and fp8; the embedding and norms keep bf16.
  const int o = l.FindTensor(kLayer + "self_attn.o_proj.weight");
  EXPECT_EQ(l.tensors[static_cast<size_t>(o)].dtype, DType::kFP8E4M3);
  EXPECT_EQ(l.tensors[static_cast<size_t>(l.FindTensor("model.embed_tokens.weight"))].dtype,
            DType::kBF16);
  bool marked = false;
  for (const StoredTransform& t : l.transforms) marked = marked || t.tensor == o;
  EXPECT_TRUE(marked);
  EXPECT_FALSE(IsFp8BlockQuantized("model.layers.3.mlp.gate.weight"));
  EXPECT_TRUE(IsFp8BlockQuantized("model.layers.3.self_attn.kv_a_proj_with_mqa.weight"));
}

TEST(Fp8BlockWeightsTest, ExpertScalesPerLocalExpert) {
  // ep 2: 2 local experts a rank. Fp8MoEMethod: w13_weight_scale_inv
  // [2, 2 * ceil(128/128), ceil(256/128)], w2_weight_scale_inv [2, ceil(256/128), ceil(128/128)].
  Layout l = BuildAsSpecified(OneMoeLayer(128), "vllm:tp=2,ep=2,quant=fp8_block");
  EXPECT_EQ(BytesOf(l, 1, kLayer + "mlp.experts.routed_experts.w13_weight"), 2 * 256 * 256);
  EXPECT_EQ(BytesOf(l, 1, kLayer + "mlp.experts.routed_experts.w13_weight_scale_inv"),
            2 * 2 * 2 * 4);
  EXPECT_EQ(BytesOf(l, 1, kLayer + "mlp.experts.routed_experts.w2_weight_scale_inv"),
            2 * 2 * 1 * 4);
  // FFN 192: "The output_size of gate's and up's weight = 192 ..." even without a split.
  Result<Layout> bad = BuildFrameworkLayout(OneMoeLayer(192), Spec("vllm:tp=2,ep=2,quant=fp8_block"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("The output_size of gate's and up's weight = 192 is not "
                                        "divisible by weight quantization block_n = 128."),
            std::string::npos)
      << bad.status().message();
}

TEST(Fp8BlockWeightsTest, RejectedAsVllmRejectsIt) {
  // FFN 384 over tp 2: gate_up's output partitions of 192 rows.
  Result<Layout> l =
      BuildFrameworkLayout(PresetOf(OneLayer(384)), Spec("vllm:tp=2,quant=fp8_block"));
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(
                "Weight output_partition_size = 192 is not divisible by weight quantization "
                "block_n = 128."),
            std::string::npos)
      << l.status().message();
}

TEST(Fp8BlockWeightsTest, ListedAsBlockScaledAndQuantizedByThePlan) {
  ModelPreset p = PresetOf(OneLayer(512));
  RefitOptions options;
  options.gpus_per_node = 2;
  Result<RefitLayouts> refit =
      BuildRefitLayouts(p, Spec("megatron:tp=1"), Spec("vllm:tp=2,quant=fp8_block"), options);
  ASSERT_TRUE(refit.ok()) << refit.status().ToString();
  const Layout& l = refit->destination;
  // Per rank: qkv_proj [384, 256], o_proj [256, 128], gate_up_proj [512, 256], down_proj [256, 256].
  ASSERT_EQ(l.block_scaled.size(), 8u);
  for (const BlockScaledBuffer& s : l.block_scaled) {
    const std::string& name = l.buffers[static_cast<size_t>(s.buffer)].name;
    EXPECT_EQ(l.buffers[static_cast<size_t>(s.scales)].name, name + "_scale_inv");
    if (name == kLayer + "self_attn.qkv_proj.weight") {
      EXPECT_EQ(s.matrices, 1);
      EXPECT_EQ(s.rows, 384);
      EXPECT_EQ(s.cols, 256);
    }
  }
  Result<PlanResult> plan = PlanReshard(refit->source, l, refit->topology);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int quantizes = 0;
  for (const Op& op : plan->plan.ops) quantizes += op.kind == OpKind::kQuantize;
  EXPECT_EQ(quantizes, 8);
}

TEST(Fp8BlockWeightsTest, ExpertBuffersAreStacksOfMatrices) {
  Layout l = BuildAsSpecified(OneMoeLayer(128), "vllm:tp=2,ep=2,quant=fp8_block");
  const int w13 = l.FindBuffer(1, kLayer + "mlp.experts.routed_experts.w13_weight");
  bool found = false;
  for (const BlockScaledBuffer& s : l.block_scaled) {
    if (s.buffer != w13) continue;
    found = true;
    EXPECT_EQ(s.matrices, 2);  // two local experts, each gate and up of 128 rows over 256 columns
    EXPECT_EQ(s.rows, 256);
    EXPECT_EQ(s.cols, 256);
  }
  EXPECT_TRUE(found);
}

// Two such layers over vllm:tp=2,pp=2: get_pp_indices(2, s, 2) gives PP rank 0 (ranks 0, 1)
// layer 0 and PP rank 1 (ranks 2, 3) layer 1 (vllm/distributed/utils.py); Fp8LinearMethod
// creates each weight_scale_inv beside its weight in the layer, so the scales live where their
// layer's weights do and the embedding (PP rank 0) and lm_head (PP rank 1) have none.
TEST(Fp8BlockWeightsTest, ScalesOnTheirLayersPipelineRank) {
  ModelConfig c = OneLayer(512);
  c.num_layers = 2;
  ModelPreset p = PresetOf(c);
  Layout l = BuildAsSpecified(p, "vllm:tp=2,pp=2,quant=fp8_block");
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string mine = "model.layers." + std::to_string(rank / 2) + ".";
    const std::string other = "model.layers." + std::to_string(1 - rank / 2) + ".";
    EXPECT_EQ(BytesOf(l, rank, mine + "self_attn.qkv_proj.weight"), 384 * 256);
    EXPECT_EQ(BytesOf(l, rank, mine + "self_attn.qkv_proj.weight_scale_inv"), 3 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, mine + "self_attn.o_proj.weight_scale_inv"), 2 * 1 * 4);
    EXPECT_EQ(BytesOf(l, rank, mine + "mlp.gate_up_proj.weight_scale_inv"), 4 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, mine + "mlp.down_proj.weight_scale_inv"), 2 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, other + "self_attn.qkv_proj.weight_scale_inv"), -1);
    EXPECT_EQ(BytesOf(l, rank, "model.embed_tokens.weight_scale_inv"), -1);
    EXPECT_EQ(BytesOf(l, rank, "lm_head.weight_scale_inv"), -1);
  }
  // down_proj of layer 1 on rank 3: columns 256..511 of [256, 512], one byte each
  auto down = FragmentsIn(l, 3, "model.layers.1.mlp.down_proj.weight",
                          "model.layers.1.mlp.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].box.lo[1], 256);
  EXPECT_EQ(BytesOf(l, 3, "model.layers.1.mlp.down_proj.weight"), 256 * 256);
  ASSERT_EQ(l.block_scaled.size(), 16u);  // 4 projections on each of the 4 ranks
  for (const BlockScaledBuffer& s : l.block_scaled) {
    EXPECT_EQ(l.buffers[static_cast<size_t>(s.scales)].rank,
              l.buffers[static_cast<size_t>(s.buffer)].rank);
  }
  // The plan quantizes each buffer on its own rank (the destination after megatron's one rank).
  RefitOptions options;
  options.gpus_per_node = 4;
  Result<RefitLayouts> refit =
      BuildRefitLayouts(p, Spec("megatron:tp=1"), Spec("vllm:tp=2,pp=2,quant=fp8_block"), options);
  ASSERT_TRUE(refit.ok()) << refit.status().ToString();
  Result<PlanResult> plan = PlanReshard(refit->source, refit->destination, refit->topology);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::map<int, int> per_rank;
  for (const Op& op : plan->plan.ops) {
    if (op.kind != OpKind::kQuantize) continue;
    const auto& scales = refit->destination.buffers[static_cast<size_t>(op.data.buffer)];
    EXPECT_EQ(scales.rank, op.rank) << scales.name;
    const std::string layer = "model.layers." + std::to_string((op.rank - 1) / 2) + ".";
    EXPECT_EQ(scales.name.rfind(layer, 0), 0u) << scales.name << " on rank " << op.rank;
    ++per_rank[op.rank];
  }
  EXPECT_EQ(per_rank, (std::map<int, int>{{1, 4}, {2, 4}, {3, 4}, {4, 4}}));
}

// Two MoE layers of 4 experts (FFN 128) over vllm:tp=2,pp=2,ep=2: each PP rank's EP group is its
// two ranks, 2 local experts each (expert_map_manager.py linear), and Fp8MoEMethod's
// w13_weight_scale_inv [2, 2 * 1, 2] and w2_weight_scale_inv [2, 2, 1] sit on the ranks of their
// layer.
TEST(Fp8BlockWeightsTest, ExpertScalesOnTheirLayersPipelineRank) {
  ModelConfig c = OneLayer(512);
  c.family = ModelFamily::kQwen3Moe;
  c.num_layers = 2;
  c.num_experts = 4;
  c.moe_intermediate = 128;
  Layout l = BuildAsSpecified(PresetOf(c), "vllm:tp=2,pp=2,ep=2,quant=fp8_block");
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string experts = ".mlp.experts.routed_experts.";
    const std::string mine = "model.layers." + std::to_string(rank / 2) + experts;
    const std::string other = "model.layers." + std::to_string(1 - rank / 2) + experts;
    EXPECT_EQ(BytesOf(l, rank, mine + "w13_weight"), 2 * 256 * 256);
    EXPECT_EQ(BytesOf(l, rank, mine + "w13_weight_scale_inv"), 2 * 2 * 2 * 4);
    EXPECT_EQ(BytesOf(l, rank, mine + "w2_weight_scale_inv"), 2 * 2 * 1 * 4);
    EXPECT_EQ(BytesOf(l, rank, other + "w13_weight_scale_inv"), -1);
  }
  // rank 3: PP rank 1's EP rank 1, experts 2 and 3 of layer 1, the 2nd at one byte an element
  auto up = FragmentsIn(l, 3, "model.layers.1.mlp.experts.routed_experts.w13_weight",
                        "model.layers.1.mlp.experts.[0:4].up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 2);
  EXPECT_EQ(up[0].box.hi[0], 4);
  EXPECT_EQ(up[0].loc.byte_offset, 128 * 256);  // after the first expert's 128 gate rows
  for (const BlockScaledBuffer& s : l.block_scaled) {
    if (l.buffers[static_cast<size_t>(s.buffer)].name.find(".experts.") == std::string::npos) continue;
    EXPECT_EQ(s.matrices, 2);
  }
}

// scale_fmt=ue8m0: vLLM requantizes to UE8M0 scales the weights DeepGEMM runs
// (vllm/utils/deep_gemm.py should_use_deepgemm_for_fp8_linear: rows % 64 == 0 and
// cols % 128 == 0; vllm/model_executor/layers/quantization/utils/fp8_utils.py
// maybe_post_process_fp8_weight_block) and every expert buffer (prepare_fp8_moe_layer_for_deepgemm).
// Hidden 192 at tp=1: qkv_proj [512, 192] and gate_up_proj [1024, 192] have 192 columns, so the
// triton/cutlass kernels run them with their float32 scales; o_proj [192, 256] and down_proj
// [192, 512] go to DeepGEMM.
TEST(Fp8BlockWeightsTest, Ue8m0ScalesWhereDeepGemmRunsTheWeight) {
  ModelConfig c = OneLayerConfig("one-layer-192", ModelFamily::kLlama, 192, 2, 1, 128, 512);
  c.intermediate = 512;
  Layout l = Build(PresetOf(c), "vllm:tp=1,quant=fp8_block,scale_fmt=ue8m0");
  std::map<std::string, Fp8ScaleFormat> fmt;
  for (const BlockScaledBuffer& s : l.block_scaled) fmt[l.buffers[static_cast<size_t>(s.buffer)].name] = s.scale_fmt;
  ASSERT_EQ(fmt.size(), 4u);
  EXPECT_EQ(fmt[kLayer + "self_attn.qkv_proj.weight"], Fp8ScaleFormat::kFloat32);
  EXPECT_EQ(fmt[kLayer + "mlp.gate_up_proj.weight"], Fp8ScaleFormat::kFloat32);
  EXPECT_EQ(fmt[kLayer + "self_attn.o_proj.weight"], Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(fmt[kLayer + "mlp.down_proj.weight"], Fp8ScaleFormat::kUe8m0);
  // Without scale_fmt every buffer keeps float32 scales.
  for (const BlockScaledBuffer& s : Build(PresetOf(c), "vllm:tp=1,quant=fp8_block").block_scaled) {
    EXPECT_EQ(s.scale_fmt, Fp8ScaleFormat::kFloat32);
  }
  // Experts: ue8m0 whatever their shape (the FFN partition is whole blocks anyway).
  Layout moe = BuildAsSpecified(OneMoeLayer(128), "vllm:tp=2,ep=2,quant=fp8_block,scale_fmt=ue8m0");
  int experts = 0;
  for (const BlockScaledBuffer& s : moe.block_scaled) {
    if (moe.buffers[static_cast<size_t>(s.buffer)].name.find("mlp.experts.") == std::string::npos) continue;
    ++experts;
    EXPECT_EQ(s.scale_fmt, Fp8ScaleFormat::kUe8m0);
  }
  EXPECT_EQ(experts, 4);  // w13 and w2 on each of the 2 ranks
  EXPECT_FALSE(RequantizedToUe8m0({1, 96, 128}, false, DType::kBF16));
  // MLA's fused_qkv_a_proj [1536 + 512 + 64, 7168]: 2112 = 33 * 64
  EXPECT_TRUE(RequantizedToUe8m0({1, 2112, 7168}, false, DType::kBF16));
  EXPECT_TRUE(RequantizedToUe8m0({4, 96, 100}, true, DType::kBF16));
}

// vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py: DeepGemmFp8BlockScaledMMKernel
// can_implement only a bf16 output (orig_dtype, the model's dtype), so with an fp16 model every
// linear weight runs on CUTLASS or Triton and keeps float32 scales, o_proj [192, 256] and
// down_proj [192, 512] too; the DeepGEMM MoE backend's experts are requantized whatever the dtype
// (fused_moe/oracle/fp8.py convert_to_fp8_moe_kernel_format).
TEST(Fp8BlockWeightsTest, Ue8m0LinearScalesOnlyForBf16Models) {
  ModelConfig c = OneLayerConfig("one-layer-192-fp16", ModelFamily::kLlama, 192, 2, 1, 128, 512);
  c.intermediate = 512;
  c.dtype = DType::kFP16;
  Layout l = Build(PresetOf(c), "vllm:tp=1,quant=fp8_block,scale_fmt=ue8m0");
  ASSERT_EQ(l.block_scaled.size(), 4u);
  for (const BlockScaledBuffer& s : l.block_scaled) {
    EXPECT_EQ(s.scale_fmt, Fp8ScaleFormat::kFloat32) << l.buffers[static_cast<size_t>(s.buffer)].name;
  }
  ModelConfig moe = OneLayer(512);
  moe.family = ModelFamily::kQwen3Moe;
  moe.num_experts = 4;
  moe.moe_intermediate = 128;
  moe.dtype = DType::kFP16;
  Layout experts = BuildAsSpecified(PresetOf(moe), "vllm:tp=2,ep=2,quant=fp8_block,scale_fmt=ue8m0");
  int ue8m0 = 0;
  for (const BlockScaledBuffer& s : experts.block_scaled) {
    const bool expert =
        experts.buffers[static_cast<size_t>(s.buffer)].name.find("mlp.experts.") != std::string::npos;
    EXPECT_EQ(s.scale_fmt, expert ? Fp8ScaleFormat::kUe8m0 : Fp8ScaleFormat::kFloat32);
    ue8m0 += expert ? 1 : 0;
  }
  EXPECT_EQ(ue8m0, 4);
  EXPECT_FALSE(RequantizedToUe8m0({1, 256, 256}, false, DType::kFP16));
  EXPECT_TRUE(RequantizedToUe8m0({1, 256, 256}, false, DType::kBF16));
}

TEST(Fp8BlockWeightsTest, Ue8m0SpecIsParsedPrintedAndNeedsFp8Block) {
  Result<FrameworkSpec> spec = ParseFrameworkSpec("vllm:tp=2,quant=fp8_block,scale_fmt=ue8m0");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->vllm.fp8_scale_fmt, Fp8ScaleFormat::kUe8m0);
  EXPECT_NE(spec->ToString().find(",quant=fp8_block,scale_fmt=ue8m0"), std::string::npos) << spec->ToString();
  Result<FrameworkSpec> bad = ParseFrameworkSpec("vllm:tp=2,quant=fp8_block,scale_fmt=e8m0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad value 'e8m0' for scale_fmt: expected float32, ue8m0 or ue8m0_packed"),
            std::string::npos) << bad.status().ToString();
  Result<Layout> alone = BuildFrameworkLayout(PresetOf(OneLayer(512)), Spec("vllm:tp=2,scale_fmt=ue8m0"));
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("scale_fmt=ue8m0 without quant=fp8_block"), std::string::npos)
      << alone.status().ToString();
}

// scale_fmt=ue8m0_packed, vLLM on SM100: the buffers DeepGEMM runs (as ue8m0) hold its packed
// codes. vllm/model_executor/layers/quantization/utils/fp8_utils.py
// deepgemm_post_process_fp8_weight_block passes mn = rows, k = cols of each [G, rows, cols] weight
// to deepgemm_post_process_weight_scale_block, whose transform_sf_into_required_layout
// (deepseek-ai/DeepGEMM csrc/apis/layout.hpp, SM100 branch) returns int32 [G, rows,
// ceil(ceil(cols/128)/4)] with strides [P * align(rows, 4), 1, align(rows, 4)]
// (csrc/jit_kernels/impls/smxx_layout.hpp get_mn_major_tma_aligned_packed_ue8m0_tensor):
// G * P * align(rows, 4) * 4 bytes. Hidden 192: o_proj [192, 256] (2 block columns, P 1) and
// down_proj [192, 512] (4, P 1) are 192 words; qkv_proj [512, 192] (q 256, k and v 128) and
// gate_up_proj [1024, 192] keep float32 [4, 2] and [8, 2]. Experts (hidden 256, FFN 128, 2 a rank): w13 [2, 256, 256] and
// w2 [2, 256, 128], 256 words a matrix.
TEST(Fp8BlockWeightsTest, Ue8m0PackedScalesSizedAsDeepGemmsTensors) {
  ModelConfig c = OneLayerConfig("one-layer-192", ModelFamily::kLlama, 192, 2, 1, 128, 512);
  c.intermediate = 512;
  Layout l = Build(PresetOf(c), "vllm:tp=1,quant=fp8_block,scale_fmt=ue8m0_packed");
  std::map<std::string, Fp8ScaleFormat> fmt;
  for (const BlockScaledBuffer& s : l.block_scaled) fmt[l.buffers[static_cast<size_t>(s.buffer)].name] = s.scale_fmt;
  EXPECT_EQ(fmt[kLayer + "self_attn.o_proj.weight"], Fp8ScaleFormat::kUe8m0Packed);
  EXPECT_EQ(fmt[kLayer + "mlp.down_proj.weight"], Fp8ScaleFormat::kUe8m0Packed);
  EXPECT_EQ(fmt[kLayer + "self_attn.qkv_proj.weight"], Fp8ScaleFormat::kFloat32);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "self_attn.o_proj.weight_scale_inv"), 192 * 4);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "mlp.down_proj.weight_scale_inv"), 192 * 4);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "self_attn.qkv_proj.weight_scale_inv"), 4 * 2 * 4);
  EXPECT_EQ(BytesOf(l, 0, kLayer + "mlp.gate_up_proj.weight_scale_inv"), 8 * 2 * 4);
  Layout moe = BuildAsSpecified(OneMoeLayer(128), "vllm:tp=2,ep=2,quant=fp8_block,scale_fmt=ue8m0_packed");
  for (int rank : {0, 1}) {
    EXPECT_EQ(BytesOf(moe, rank, kLayer + "mlp.experts.routed_experts.w13_weight_scale_inv"),
              2 * 256 * 4);
    EXPECT_EQ(BytesOf(moe, rank, kLayer + "mlp.experts.routed_experts.w2_weight_scale_inv"),
              2 * 256 * 4);
  }
  int packed = 0;
  for (const BlockScaledBuffer& s : moe.block_scaled) {
    const bool expert = moe.buffers[static_cast<size_t>(s.buffer)].name.find("mlp.experts.") != std::string::npos;
    packed += expert && s.scale_fmt == Fp8ScaleFormat::kUe8m0Packed;
  }
  EXPECT_EQ(packed, 4);  // w13 and w2 on each rank
  Result<FrameworkSpec> spec = ParseFrameworkSpec("vllm:tp=2,quant=fp8_block,scale_fmt=ue8m0_packed");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_NE(spec->ToString().find(",scale_fmt=ue8m0_packed"), std::string::npos) << spec->ToString();
}

}  // namespace
}  // namespace ferry::models
