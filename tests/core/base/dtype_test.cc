// Tests for DType sizes, names and parsing.
#include "core/base/dtype.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kFP16), 2);
  EXPECT_EQ(DTypeSize(DType::kFP32), 4);
  EXPECT_EQ(DTypeSize(DType::kFP64), 8);
  EXPECT_EQ(DTypeSize(DType::kFP8E4M3), 1);
  EXPECT_EQ(DTypeSize(DType::kFP8E5M2), 1);
  EXPECT_EQ(DTypeSize(DType::kInt8), 1);
  EXPECT_EQ(DTypeSize(DType::kInt16), 2);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType d : kAllDTypes) {
    Result<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
}

TEST(DTypeTest, Aliases) {
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float8_e4m3fn"), DType::kFP8E4M3);
  EXPECT_EQ(*ParseDType("float32"), DType::kFP32);
}

TEST(DTypeTest, UnknownNameIsNamedInError) {
  Result<DType> r = ParseDType("fp4");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown dtype 'fp4'"), std::string::npos);
}

}  // namespace
}  // namespace ferry
