// An engine's FP8 block-quantized weights, vLLM's or SGLang's (a checkpoint whose
// quantization_config is fp8 with weight_block_size [128, 128], as DeepSeek-V3's and Kimi-K2's):
// every linear projection of the decoder layers holds fp8 e4m3 values, one byte each, beside a
// weight_scale_inv parameter of fp32 scales, one per 128x128 block of the rank's partition.
// Embeddings, the output layer, norms and routers stay in the model's dtype.
//
// StoreFp8BlockWeights rewrites a vLLM or SGLang layout to that storage: the projections'
// tensors become fp8 e4m3 marked with a StoredTransform (their values are the bf16 weights
// divided by per-block scales, which no plain cast produces), their fragments move to one-byte
// offsets, and each projection buffer gets its "<name>_scale_inv" buffer, the pair listed in the
// layout's block_scaled, so that the planner quantizes into them (planner/block_quantize.h). The
// engine's shape checks come first, with its messages.
// Follows vllm/model_executor/layers/quantization/fp8.py (Fp8LinearMethod and Fp8MoEMethod
// create_weights: weight_scale_inv [ceil(out/128), ceil(in/128)], w13_weight_scale_inv
// [experts, 2 * ceil(I/128), ceil(H/128)], w2_weight_scale_inv [experts, ceil(H/128),
// ceil(I/128)]) and vllm/model_executor/layers/quantization/utils/fp8_utils.py
// validate_fp8_block_shape; SGLang 0.5.23 stores them alike (python/sglang/srt/layers/
// quantization/fp8.py Fp8LinearMethod.create_fp8_weight_ and Fp8MoEMethod.create_weights, the
// same parameters and scale shapes) and checks them in validate_block_quant_shapes.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/base/fp8_scale_format.h"
#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::models {

inline constexpr int64_t kFp8Block = 128;
inline constexpr const char* kFp8BlockTransform =
    "fp8 e4m3 in 128x128 blocks scaled by weight_scale_inv (block quantization, as vLLM and "
    "SGLang store it)";

// Whether the checkpoint tensor `name` is block-quantized: a decoder layer's *_proj weight
// (attention, MLP, shared and routed experts), an MTP layer's decoder layer (vLLM's mtp_block)
// included, not the router (mlp.gate) nor an MTP layer's eh_proj.
bool IsFp8BlockQuantized(const std::string& name);

// A buffer of `matrices` [rows, cols] matrices (an expert buffer: one matrix a local expert).
struct MatrixStack {
  int64_t matrices = 1, rows = 0, cols = 0;
};

// Whether vLLM requantizes a buffer to UE8M0 scales when DeepGEMM runs with E8M0 scales: expert
// buffers always (vllm/model_executor/layers/fused_moe/oracle/fp8.py, DeepGEMM MoE backend:
// prepare_fp8_moe_layer_for_deepgemm), a linear weight of [rows, cols] (the rank's partition)
// when DeepGEMM runs it: the layer's unquantized dtype `dtype` (orig_dtype, the engine's
// --dtype) is bf16, rows % 64 == 0 and cols % 128 == 0
// (vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py DeepGemmFp8BlockScaledMMKernel:
// can_implement "Supports only output dtype of bfloat16", process_weights_after_loading
// requantizes when vllm/utils/deep_gemm.py should_use_deepgemm_for_fp8_linear). Other linear
// weights run on the CUTLASS or Triton kernels and keep their float32 scales.
bool RequantizedToUe8m0(const MatrixStack& m, bool expert, DType dtype);

// Whose shape checks apply (their messages name the engine):
// - kVllm: vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape:
//   a TP-split weight's partitions, and a merged weight's outputs but the last when it is not
//   split, divide into 128-row blocks; a row-parallel partition's input into 128 columns.
// - kSglang: python/sglang/srt/layers/quantization/fp8.py Fp8LinearMethod
//   validate_block_quant_shapes: the same (it also checks the last output of a merged weight that
//   is not split, which in the models ferry lays out is as large as an earlier one); and
//   DeepSeek's fused_qkv_a_proj_with_mqa, a ReplicatedLinear whose loader concatenates
//   q_a_proj's and kv_a_proj_with_mqa's weights and block scales
//   (models/deepseek_common/deepseek_weight_loader.py), needs q_a_proj's rows in whole blocks
//   for the concatenated scales to fit its weight_scale_inv.
enum class Fp8Engine { kVllm, kSglang };

// Rewrites the buffers from index `buffers_begin` on. `experts` gives the expert buffers'
// geometry by buffer index; other buffers are one row-major matrix, read from their fragments.
// `scale_fmt` kUe8m0: the engine uses DeepGEMM with E8M0 scales, so the buffers vLLM requantizes
// (RequantizedToUe8m0) hold UE8M0 scales (core/base/fp8_scale_format.h); kUe8m0Packed: the same
// on SM100, where vLLM replaces those weight_scale_inv parameters by DeepGEMM's packed int32
// codes after loading (vllm/model_executor/layers/quantization/utils/fp8_utils.py
// deepgemm_post_process_weight_scale_block; core/base/fp8_packed_scales.h), sized as those.
Status StoreFp8BlockWeights(Layout& layout, size_t buffers_begin,
                            const std::map<int, MatrixStack>& experts,
                            Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32,
                            Fp8Engine engine = Fp8Engine::kVllm);

}  // namespace ferry::models
