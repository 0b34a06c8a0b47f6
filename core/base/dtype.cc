// DType sizes, names and parsing.
#include "core/base/dtype.h"

#include <string>

namespace ferry {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kFP64: return "fp64";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kFP8E5M2: return "fp8_e5m2";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (DTypeName(d) == name) return d;
  }
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"bfloat16", DType::kBF16},         {"float16", DType::kFP16},
      {"half", DType::kFP16},             {"float32", DType::kFP32},
      {"float", DType::kFP32},            {"float64", DType::kFP64},
      {"double", DType::kFP64},           {"float8_e4m3fn", DType::kFP8E4M3},
      {"float8_e4m3", DType::kFP8E4M3},   {"float8_e5m2", DType::kFP8E5M2},
      {"e4m3", DType::kFP8E4M3},          {"e5m2", DType::kFP8E5M2},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.dtype;
  }
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "' (expected bf16, fp16, fp32, fp64, fp8_e4m3, fp8_e5m2, int8, int16, "
                         "int32, int64 or uint8)");
}

}  // namespace ferry
