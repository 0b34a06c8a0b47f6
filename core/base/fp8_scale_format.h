// The number format of block-scaled fp8 scales (core/base/fp8_block.h): which values a
// weight_scale_inv tensor of dense fp32 may hold, and their names in layout files, framework specs
// and plan exports.
//
//   kFloat32  any fp32 value: max(amax, 1e-4) / 448 of each block (vLLM's checkpoints as loaded)
//   kUe8m0    powers of two only, each block's fp8 values requantized to match: what
//             vllm/model_executor/layers/quantization/utils/fp8_utils.py
//             requant_weight_ue8m0_inplace leaves in weight and weight_scale_inv when DeepGEMM
//             runs with E8M0 scales (vllm/utils/deep_gemm.py is_deep_gemm_e8m0_used); still an
//             fp32 tensor of the same shape (DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0), which
//             DeepGEMM keeps as is on SM90 (deepseek-ai/DeepGEMM csrc/apis/layout.hpp
//             transform_sf_into_required_layout) and packs to int32 on SM100 (not modelled)
//
// Plain values and functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class Fp8ScaleFormat : uint8_t { kFloat32, kUe8m0 };

// "float32" or "ue8m0".
constexpr std::string_view Fp8ScaleFormatName(Fp8ScaleFormat f) {
  return f == Fp8ScaleFormat::kUe8m0 ? "ue8m0" : "float32";
}

// The format named `name`; nullopt for any other text.
constexpr std::optional<Fp8ScaleFormat> ParseFp8ScaleFormat(std::string_view name) {
  if (name == "float32") return Fp8ScaleFormat::kFloat32;
  if (name == "ue8m0") return Fp8ScaleFormat::kUe8m0;
  return std::nullopt;
}

}  // namespace ferry
