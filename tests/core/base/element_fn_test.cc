// Tests for ElementFn (core/base/element_fn.h): vLLM's Mamba A = -exp(float(A_log)) on values
// worked by hand (the fp32 nearest to -e^x, from the formula, not from ferry), special values as
// torch's exp gives them, every source dtype vLLM's loader widens, and which pairs it applies to.
#include "core/base/element_fn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ferry {
namespace {

// -exp of the bf16 value with bits `a_log`, as fp32 bits.
uint32_t NegExpOfBF16(uint16_t a_log) {
  unsigned char src[2] = {static_cast<unsigned char>(a_log), static_cast<unsigned char>(a_log >> 8)};
  unsigned char dst[4];
  TransformElement(ElementFn::kNegExp, DType::kBF16, DType::kFP32, src, dst);
  uint32_t bits;
  std::memcpy(&bits, dst, 4);
  return bits;
}

TEST(ElementFnTest, NegExpOfBF16ValuesWorkedByHand) {
  EXPECT_EQ(NegExpOfBF16(0x0000), 0xbf800000u);  // A_log 0: A = -1
  EXPECT_EQ(NegExpOfBF16(0x3f80), 0xc02df854u);  // 1: -e = -2.71828174591064453125
  EXPECT_EQ(NegExpOfBF16(0xc000), 0xbe0a9555u);  // -2: -0.1353352814912796
  EXPECT_EQ(NegExpOfBF16(0x3f00), 0xbfd3094cu);  // 0.5: -1.6487212181091309
  EXPECT_EQ(NegExpOfBF16(0x3f31), 0xbfff8e01u);  // 0.69140625: -1.9965211153030396
  EXPECT_EQ(NegExpOfBF16(0x42b1), 0xff4cdcc4u);  // 88.5: -2.723087918e38, still finite
  EXPECT_EQ(NegExpOfBF16(0xc2c8), 0x8000001bu);  // -100: -3.78e-44, an fp32 subnormal
}

TEST(ElementFnTest, SpecialValuesFollowTorchsExp) {
  EXPECT_EQ(NegExpOfBF16(0x7f80), 0xff800000u);  // +inf: exp = +inf, A = -inf
  EXPECT_EQ(NegExpOfBF16(0xff80), 0x80000000u);  // -inf: exp = +0, A = -0.0
  EXPECT_EQ(NegExpOfBF16(0x42b2), 0xff800000u);  // 89: exp overflows fp32, A = -inf
  EXPECT_EQ(NegExpOfBF16(0xc348), 0x80000000u);  // -200: exp underflows to +0, A = -0.0
  EXPECT_EQ(NegExpOfBF16(0x8000), 0xbf800000u);  // -0: A = -1
  const uint32_t nan = NegExpOfBF16(0x7fc0);
  EXPECT_EQ(nan & 0x7f800000u, 0x7f800000u);
  EXPECT_NE(nan & 0x007fffffu, 0u);  // a NaN stays a NaN
  EXPECT_EQ(nan >> 31, 1u);          // the negation flips its sign, as torch's neg does
}

TEST(ElementFnTest, Fp16AndFp32SourcesAreWidenedExactlyFirst) {
  unsigned char dst[4];
  uint32_t bits;
  const unsigned char half_one[2] = {0x00, 0x3c};  // fp16 1.0
  TransformElement(ElementFn::kNegExp, DType::kFP16, DType::kFP32, half_one, dst);
  std::memcpy(&bits, dst, 4);
  EXPECT_EQ(bits, 0xc02df854u);
  const float x = -2.0f;
  unsigned char single[4];
  std::memcpy(single, &x, 4);
  TransformElement(ElementFn::kNegExp, DType::kFP32, DType::kFP32, single, dst);
  std::memcpy(&bits, dst, 4);
  EXPECT_EQ(bits, 0xbe0a9555u);
}

TEST(ElementFnTest, NoneConvertsAsFloatConvertDoes) {
  const unsigned char one[2] = {0x80, 0x3f};  // bf16 1.0
  unsigned char dst[4];
  TransformElement(ElementFn::kNone, DType::kBF16, DType::kFP32, one, dst);
  float v;
  std::memcpy(&v, dst, 4);
  EXPECT_EQ(v, 1.0f);
}

TEST(ElementFnTest, AppliesFromWideFloatsIntoFp32Only) {
  for (DType from : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    EXPECT_TRUE(ElementFnApplies(ElementFn::kNegExp, from, DType::kFP32)) << DTypeName(from);
    EXPECT_FALSE(ElementFnApplies(ElementFn::kNegExp, from, DType::kBF16)) << DTypeName(from);
  }
  for (DType from : {DType::kFP64, DType::kInt8, DType::kFP8E4M3, DType::kInt32}) {
    EXPECT_FALSE(ElementFnApplies(ElementFn::kNegExp, from, DType::kFP32)) << DTypeName(from);
  }
  EXPECT_TRUE(ElementFnApplies(ElementFn::kNone, DType::kInt8, DType::kInt8));
  EXPECT_FALSE(ElementFnApplies(static_cast<ElementFn>(7), DType::kFP32, DType::kFP32));
}

TEST(ElementFnTest, NamesAndTransformTexts) {
  EXPECT_EQ(ElementFnName(ElementFn::kNegExp), "neg_exp");
  EXPECT_EQ(ElementFnName(ElementFn::kNone), "none");
  EXPECT_EQ(ElementFnOfTransform("A = -exp(A_log)"), ElementFn::kNegExp);
  EXPECT_EQ(ElementFnOfTransform(ElementFnTransform(ElementFn::kNegExp)), ElementFn::kNegExp);
  EXPECT_EQ(ElementFnOfTransform("fp8 e4m3 with 128x128 block scales"), ElementFn::kNone);
  EXPECT_EQ(ElementFnOfTransform("A = exp(A_log)"), ElementFn::kNone);
}

}  // namespace
}  // namespace ferry
