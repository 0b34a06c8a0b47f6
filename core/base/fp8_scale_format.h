// The number format of block-scaled fp8 scales (core/base/fp8_block.h): which values a
// weight_scale_inv tensor may hold, how it stores them, and their names in layout files,
// framework specs and plan exports.
//
//   kFloat32      any fp32 value: max(amax, 1e-4) / 448 of each block (vLLM's checkpoints as
//                 loaded), dense fp32 [matrices, ceil(rows/128), ceil(cols/128)]
//   kUe8m0        powers of two only, each block's fp8 values requantized to match: what
//                 vllm/model_executor/layers/quantization/utils/fp8_utils.py
//                 requant_weight_ue8m0_inplace leaves in weight and weight_scale_inv when DeepGEMM
//                 runs with E8M0 scales (vllm/utils/deep_gemm.py is_deep_gemm_e8m0_used); still an
//                 fp32 tensor of the same shape (DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0), which
//                 DeepGEMM keeps as is on SM90 (deepseek-ai/DeepGEMM csrc/apis/layout.hpp
//                 transform_sf_into_required_layout)
//   kUe8m0Packed  the same values and fp8 bytes, the scales as DeepGEMM on SM100 holds them
//                 (DeepGemmQuantScaleFMT.UE8M0): E8M0 codes, one per 128-column block of each
//                 weight row, four to an int32, MN-major with rows aligned to 4
//                 (core/base/fp8_packed_scales.h)
//
// Plain values and functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/base/fp8_packed_scales.h"

namespace ferry {

enum class Fp8ScaleFormat : uint8_t { kFloat32, kUe8m0, kUe8m0Packed };

// "float32", "ue8m0" or "ue8m0_packed".
constexpr std::string_view Fp8ScaleFormatName(Fp8ScaleFormat f) {
  if (f == Fp8ScaleFormat::kUe8m0) return "ue8m0";
  if (f == Fp8ScaleFormat::kUe8m0Packed) return "ue8m0_packed";
  return "float32";
}

// The accepted names, for error messages.
inline constexpr std::string_view kFp8ScaleFormatNames = "float32, ue8m0 or ue8m0_packed";

// The format named `name`; nullopt for any other text.
constexpr std::optional<Fp8ScaleFormat> ParseFp8ScaleFormat(std::string_view name) {
  if (name == "float32") return Fp8ScaleFormat::kFloat32;
  if (name == "ue8m0") return Fp8ScaleFormat::kUe8m0;
  if (name == "ue8m0_packed") return Fp8ScaleFormat::kUe8m0Packed;
  return std::nullopt;
}

// Whether scales of format `f` are powers of two with the values requantized to them.
FERRY_HD constexpr bool Fp8ScaleIsUe8m0(Fp8ScaleFormat f) {
  return f == Fp8ScaleFormat::kUe8m0 || f == Fp8ScaleFormat::kUe8m0Packed;
}

// Bytes of the scales of one [rows, cols] matrix in format `f` (rows, cols >= 0).
FERRY_HD constexpr int64_t Fp8ScaleMatrixBytes(Fp8ScaleFormat f, int64_t rows, int64_t cols) {
  if (f == Fp8ScaleFormat::kUe8m0Packed) return Fp8PackedScaleMatrixBytes(rows, cols);
  return (rows + 127) / 128 * ((cols + 127) / 128) * 4;
}

}  // namespace ferry
