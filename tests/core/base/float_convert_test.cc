// float_convert: the CPU reference conversion checked against an independent oracle (every code of
// the target format decoded with ldexp, the nearest one found by search, ties to the even code) on
// random fp32 bit patterns and on hand-picked special values: subnormals, halfway cases, overflow,
// ±inf and NaN; the specialised e4m3 cast against the generic one.
#include "core/base/float_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace ferry {
namespace {

// The value of small-float `code` by the format's definition (NaN/inf included).
double Decode(uint32_t code, SmallFloat fmt) {
  const int width = fmt.exp_bits + fmt.man_bits, bias = (1 << (fmt.exp_bits - 1)) - 1;
  const uint32_t exp_max = (1u << fmt.exp_bits) - 1, man_max = (1u << fmt.man_bits) - 1;
  const double sign = (code >> width & 1u) ? -1.0 : 1.0;
  const uint32_t e = code >> fmt.man_bits & exp_max, m = code & man_max;
  if (fmt.finite_only && e == exp_max && m == man_max) return std::nan("");
  if (!fmt.finite_only && e == exp_max) return m != 0 ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - fmt.man_bits);
  return sign * std::ldexp(static_cast<double>(m + (1u << fmt.man_bits)), static_cast<int>(e) - bias - fmt.man_bits);
}

// The oracle: the nearest finite code to finite `x` (ties to the even code); beyond the largest
// finite value by at least half its ulp, `overflow` (saturation or inf).
uint32_t Oracle(double x, SmallFloat fmt, uint32_t overflow_code) {
  const int width = fmt.exp_bits + fmt.man_bits;
  const uint32_t sign = std::signbit(x) ? 1u << width : 0;
  const double a = std::fabs(x);
  uint32_t best = 0, max_code = 0;
  double best_err = INFINITY;
  for (uint32_t c = 0; c < (1u << width); ++c) {
    const double v = Decode(c, fmt);
    if (!std::isfinite(v)) continue;
    max_code = c;
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (c & 1u) == 0)) {
      best = c;
      best_err = err;
    }
  }
  const double max = Decode(max_code, fmt), ulp = max - Decode(max_code - 1, fmt);
  if (a >= max + ulp / 2) return sign | overflow_code;
  return sign | best;
}

std::vector<float> TestValues() {
  std::vector<float> v = {0.f, -0.f, 1.f, -1.f, 448.f, 464.f, 479.f, 480.f, 1e6f, -1e6f, 57344.f, 61439.f,
                          61440.f, 65504.f, 65519.f, 65520.f, std::ldexp(1.f, -9), std::ldexp(1.f, -10),
                          std::ldexp(1.5f, -10), std::ldexp(1.f, -16), std::ldexp(1.f, -17), std::ldexp(3.f, -18),
                          std::ldexp(1.f, -24), std::ldexp(1.f, -25), std::ldexp(1.0000001f, -25),
                          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()};
  std::mt19937 rng(25);
  for (int i = 0; i < 20000; ++i) v.push_back(BitsToFloat(static_cast<uint32_t>(rng())));
  // Random values in the fp8/fp16 range, where rounding matters most.
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-28, 17);
  for (int i = 0; i < 20000; ++i) v.push_back((i & 1 ? -1.f : 1.f) * std::ldexp(mantissa(rng), exponent(rng)));
  return v;
}

void CheckFormat(SmallFloat fmt, bool saturate, uint32_t nan, uint32_t inf, uint32_t max_finite) {
  const int width = fmt.exp_bits + fmt.man_bits;
  for (float x : TestValues()) {
    const uint32_t got = FloatToSmall(x, fmt, saturate);
    uint32_t want;
    const uint32_t sign = std::signbit(x) ? 1u << width : 0;
    if (std::isnan(x)) {
      want = sign | nan;
    } else if (std::isinf(x)) {
      want = sign | inf;
    } else {
      want = Oracle(x, fmt, saturate ? max_finite : inf);
    }
    ASSERT_EQ(got, want) << "x = " << x << " (bits " << std::hex << FloatBits(x) << ")";
  }
}

TEST(FloatConvertTest, DecodesEveryCodeOfTheSmallFormats) {
  for (SmallFloat fmt : {kE4M3Format, kE5M2Format, kHalfFormat}) {
    const int width = fmt.exp_bits + fmt.man_bits;
    for (uint32_t c = 0; c < (2u << width); ++c) {
      const double want = Decode(c, fmt);
      const float got = SmallToFloat(c, fmt);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c;
        EXPECT_EQ(std::signbit(got), (c >> width & 1u) != 0) << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << c;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << c;
      }
    }
  }
}

TEST(FloatConvertTest, E4M3RoundsToNearestEvenAndSaturatesInfinityTo448) {
  CheckFormat(kE4M3Format, true, 0x7f, 0x7e, 0x7e);
  EXPECT_EQ(FloatToSmall(464.f, kE4M3Format, true), 0x7eu);   // halfway above 448: saturates
  EXPECT_EQ(FloatToSmall(-INFINITY, kE4M3Format, true), 0xfeu);
  EXPECT_EQ(FloatToSmall(std::ldexp(1.f, -9), kE4M3Format, true), 0x01u);  // smallest subnormal
  EXPECT_EQ(FloatToSmall(std::ldexp(1.f, -10), kE4M3Format, true), 0x00u);  // tie to even zero
}

// FloatToE4m3, FloatToSmall specialised for e4m3, gives its bits on every bf16 value (every fp32
// exponent, sign and leading mantissa), on the oracle's test values and on every fp32 of the
// exponents around e4m3's range (the subnormal, normal and saturation boundaries).
TEST(FloatConvertTest, FloatToE4m3IsFloatToSmallForE4M3) {
  auto check = [](float x) {
    ASSERT_EQ(FloatToE4m3(x), FloatToSmall(x, kE4M3Format, true))
        << "x = " << x << " (bits " << std::hex << FloatBits(x) << ")";
  };
  for (uint32_t b = 0; b < 0x10000u; ++b) check(BF16ToFloat(static_cast<uint16_t>(b)));
  for (float x : TestValues()) check(x);
  for (uint32_t bits = 0x3a000000u; bits < 0x44000000u; bits += 7) {  // 2^-11 .. 512
    check(BitsToFloat(bits));
    check(BitsToFloat(bits | 0x80000000u));
  }
}

TEST(FloatConvertTest, E4m3ToFloatIsSmallToFloatForEveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    ASSERT_EQ(FloatBits(E4m3ToFloat(c)), FloatBits(SmallToFloat(c, kE4M3Format))) << c;
  }
}

TEST(FloatConvertTest, E5M2KeepsInfinityAndSaturatesFiniteOverflow) {
  CheckFormat(kE5M2Format, true, 0x7e, 0x7c, 0x7b);
  EXPECT_EQ(FloatToSmall(1e6f, kE5M2Format, true), 0x7bu);
  EXPECT_EQ(FloatToSmall(INFINITY, kE5M2Format, true), 0x7cu);
}

TEST(FloatConvertTest, HalfIsIeeeRoundToNearestEven) {
  CheckFormat(kHalfFormat, false, 0x7e00, 0x7c00, 0x7bff);
  EXPECT_EQ(FloatToSmall(65520.f, kHalfFormat, false), 0x7c00u);  // rounds up to inf
}

TEST(FloatConvertTest, BF16RoundsToNearestEvenAndKeepsSpecials) {
  for (float x : TestValues()) {
    const uint16_t got = FloatToBF16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(BF16ToFloat(got)));
      continue;
    }
    // Oracle: the two bf16 neighbours of x (truncation and the next code), nearer one, ties even.
    const uint16_t down = static_cast<uint16_t>(FloatBits(x) >> 16);
    const double lo = BF16ToFloat(down), hi = BF16ToFloat(static_cast<uint16_t>(down + 1));
    const double err_lo = std::fabs(x - lo), err_hi = std::isinf(hi) && !std::isinf(x) ? std::fabs(x - lo) + 1 : std::fabs(x - hi);
    uint16_t want = err_lo < err_hi || (err_lo == err_hi && (down & 1u) == 0) ? down : static_cast<uint16_t>(down + 1);
    if (std::isinf(x)) want = down;
    if (std::isinf(hi) && !std::isinf(x) && std::fabs(static_cast<double>(x)) >= lo + (lo - BF16ToFloat(static_cast<uint16_t>(down - 1))) / 2) {
      want = static_cast<uint16_t>(down + 1);  // beyond the largest bf16 by half an ulp: inf
    }
    ASSERT_EQ(got, want) << x;
  }
}

TEST(FloatConvertTest, ConvertElementGoesThroughFp32Exactly) {
  unsigned char bf16[2], e4m3[1], f32[4];
  StoreFromFloat(DType::kBF16, bf16, 3.140625f);  // exact in bf16
  ConvertElement(DType::kBF16, DType::kFP8E4M3, bf16, e4m3);
  EXPECT_EQ(e4m3[0], 0x45);  // 3.25: 3.140625 lies nearer 3.25 than 3.0 (step 0.25)
  ConvertElement(DType::kFP8E4M3, DType::kFP32, e4m3, f32);
  EXPECT_EQ(LoadAsFloat(DType::kFP32, f32), 3.25f);
  unsigned char nan_e4m3 = 0xff, out[2];
  ConvertElement(DType::kFP8E4M3, DType::kBF16, &nan_e4m3, out);
  EXPECT_TRUE(std::isnan(LoadAsFloat(DType::kBF16, out)));
  EXPECT_TRUE(std::signbit(LoadAsFloat(DType::kBF16, out)));
}

}  // namespace
}  // namespace ferry
