// DType: the element types ferry moves, with their sizes and canonical names.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/base/status.h"

namespace ferry {

enum class DType : uint8_t {
  kBF16,
  kFP16,
  kFP32,
  kFP64,
  kFP8E4M3,
  kFP8E5M2,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
};

inline constexpr DType kAllDTypes[] = {
    DType::kBF16,  DType::kFP16,  DType::kFP32,  DType::kFP64,  DType::kFP8E4M3, DType::kFP8E5M2,
    DType::kInt8,  DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
};

// Size of one element in bytes. Inline: the planner and the copy loops call it per region.
constexpr int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
    case DType::kInt8:
    case DType::kUInt8: return 1;
    case DType::kBF16:
    case DType::kFP16:
    case DType::kInt16: return 2;
    case DType::kFP32:
    case DType::kInt32: return 4;
    case DType::kFP64:
    case DType::kInt64: return 8;
  }
  return 0;
}

// One of the 8-bit float formats (e4m3, e5m2).
constexpr bool IsFp8(DType dtype) { return dtype == DType::kFP8E4M3 || dtype == DType::kFP8E5M2; }

// Canonical lower-case name: "bf16", "fp16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2", "int8", ...
std::string_view DTypeName(DType dtype);

// Parses a canonical name or a common alias ("bfloat16", "float32", "float8_e4m3fn", ...).
Result<DType> ParseDType(std::string_view name);

}  // namespace ferry
