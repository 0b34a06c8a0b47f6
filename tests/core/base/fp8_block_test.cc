// fp8_block: the block-scaled fp8 reference on hand-worked blocks. Expected scales are the fp32
// values of vllm/utils/deep_gemm.py per_block_cast_to_fp8 (max(amax, 1e-4) / 448, worked out by
// hand in fp32 below), expected fp8 codes the e4m3fn codes of the scaled values: saturation,
// round-to-nearest-even ties on the subnormal grid, an all-zero block, partial edge blocks, and
// the inf/NaN policy of fp8_block.h.
#include "core/base/fp8_block.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ferry {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A dense fp32 matrix as bytes.
std::vector<unsigned char> Fp32Bytes(const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

struct Quantized {
  std::vector<unsigned char> q;
  std::vector<float> scales;
};

Quantized Quantize(DType dtype, const std::vector<unsigned char>& src, int64_t matrices, int64_t rows,
              int64_t cols, Fp8ScaleFormat fmt = Fp8ScaleFormat::kFloat32) {
  const int64_t blocks = ((rows + 127) / 128) * ((cols + 127) / 128);
  Quantized out{std::vector<unsigned char>(static_cast<size_t>(matrices * rows * cols), 0xaa),
                std::vector<float>(static_cast<size_t>(matrices * blocks), -1.0f)};
  Fp8BlockQuantizeMatrices(dtype, src.data(), matrices, rows, cols, out.q.data(), out.scales.data(), fmt);
  return out;
}

TEST(Fp8BlockTest, AmaxOf448GivesScaleOneAndThePlainCast) {
  // amax 448: scale_inv 448 / 448 = 1, multiplier 1, so q is the plain e4m3fn cast: 448 -> 0x7e,
  // -1 -> 0xb8, 2^-8 -> subnormal 2 ulps (0x02), 1.5 * 2^-9 -> tie between 1 and 2 ulps -> even
  // 0x02, 2^-10 -> tie between 0 and 1 ulp -> 0x00, 0.3 -> 0.3125 (0x2a, nearest of 0.28125 and
  // 0.3125).
  const Quantized r = Quantize(DType::kFP32,
                          Fp32Bytes({448.0f, -1.0f, 0.00390625f, 0.0029296875f, 0.0009765625f, 0.3f}),
                          1, 2, 3);
  EXPECT_EQ(Bits(r.scales[0]), Bits(1.0f));
  EXPECT_EQ(r.q, (std::vector<unsigned char>{0x7e, 0xb8, 0x02, 0x02, 0x00, 0x2a}));
}

TEST(Fp8BlockTest, AmaxOneRoundsThroughTheReciprocal) {
  // scale_inv = fl(1 / 448) = 0x3b124925; multiplier fl(1 / that) = 447.999969 (0x43dfffff), so
  // 1.0 -> 447.99997 -> 448 (0x7e) and -0.5 -> -223.99998 -> -224 (0xf6): a reciprocal then a
  // multiply, not a division per element.
  const Quantized r = Quantize(DType::kFP32, Fp32Bytes({1.0f, -0.5f}), 1, 1, 2);
  EXPECT_EQ(Bits(r.scales[0]), 0x3b124925u);
  EXPECT_EQ(r.q, (std::vector<unsigned char>{0x7e, 0xf6}));
}

TEST(Fp8BlockTest, AllZeroBlockUsesTheClampedScale) {
  // amax 0 clamps to 1e-4: scale_inv fl(1e-4f / 448) = 0x346facad; zeros stay zeros, -0 keeps
  // its sign (0x80). A bf16 subnormal (0x0001, ~9.2e-41) alone scales to ~4e-34: 0.
  const Quantized r = Quantize(DType::kFP32, Fp32Bytes({0.0f, -0.0f}), 1, 1, 2);
  EXPECT_EQ(Bits(r.scales[0]), 0x346facadu);
  EXPECT_EQ(r.q, (std::vector<unsigned char>{0x00, 0x80}));
  const Quantized sub = Quantize(DType::kBF16, {0x01, 0x00}, 1, 1, 1);
  EXPECT_EQ(Bits(sub.scales[0]), 0x346facadu);
  EXPECT_EQ(sub.q[0], 0x00);
}

TEST(Fp8BlockTest, PartialEdgeBlocksAreScaledOnTheirOwn) {
  // 2 matrices of 130 x 129: 2 x 2 blocks each, the edge blocks 2 rows and/or 1 column. Each
  // block holds one distinct peak (the rest 0): its scale is peak / 448 and the peak maps to 448.
  const int64_t rows = 130, cols = 129;
  std::vector<float> v(static_cast<size_t>(2 * rows * cols), 0.0f);
  const float peaks[2][4] = {{448.0f, 896.0f, 224.0f, 112.0f}, {3.0f, 1.5f, -448.0f, 0.0f}};
  const int64_t at[4][2] = {{0, 0}, {5, 128}, {129, 3}, {128, 128}};
  for (int m = 0; m < 2; ++m) {
    for (int b = 0; b < 4; ++b) v[static_cast<size_t>(m * rows * cols + at[b][0] * cols + at[b][1])] = peaks[m][b];
  }
  v[1] = 1.0f;  // matrix 0, block (0,0): 1 / 1 stays 1 (0x38) beside the peak 448
  const Quantized r = Quantize(DType::kFP32, Fp32Bytes(v), 2, rows, cols);
  const uint32_t want_scales[8] = {Bits(1.0f), Bits(2.0f), Bits(0.5f), Bits(0.25f),
                                   0x3bdb6db7u /* fl(3/448) */, 0x3b5b6db7u /* fl(1.5/448) */,
                                   Bits(1.0f), 0x346facadu /* all zero */};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Bits(r.scales[static_cast<size_t>(i)]), want_scales[i]) << i;
  for (int m = 0; m < 2; ++m) {
    for (int b = 0; b < 3; ++b) {
      const unsigned char want = peaks[m][b] < 0 ? 0xfe : 0x7e;
      EXPECT_EQ(r.q[static_cast<size_t>(m * rows * cols + at[b][0] * cols + at[b][1])], want) << m << b;
    }
  }
  EXPECT_EQ(r.q[1], 0x38);
  EXPECT_EQ(r.q[2], 0x00);
}

TEST(Fp8BlockTest, InfinityAndNaNFollowThePolicy) {
  // +inf in a block: scale_inv +inf, multiplier 0: finite elements give ±0, the infinity NaN.
  const float inf = __builtin_inff(), nan = __builtin_nanf("");
  const Quantized i = Quantize(DType::kFP32, Fp32Bytes({-2.0f, inf, 3.0f}), 1, 1, 3);
  EXPECT_EQ(Bits(i.scales[0]), 0x7f800000u);
  EXPECT_EQ(i.q, (std::vector<unsigned char>{0x80, 0x7f, 0x00}));
  // A NaN anywhere (negative, here): scale_inv the canonical NaN, every code 0x7f.
  const Quantized n = Quantize(DType::kFP32, Fp32Bytes({1.0f, -nan, -inf}), 1, 1, 3);
  EXPECT_EQ(Bits(n.scales[0]), 0x7fc00000u);
  EXPECT_EQ(n.q, (std::vector<unsigned char>{0x7f, 0x7f, 0x7f}));
}

TEST(Fp8BlockTest, Bf16InputReadsExactly) {
  // bf16 0x4000 = 2, 0xbf80 = -1: amax 2, scale fl(2/448) = 0x3b924925, multiplier 223.999985:
  // 2 -> 448 (0x7e), -1 -> -224 (0xf6).
  const Quantized r = Quantize(DType::kBF16, {0x00, 0x40, 0x80, 0xbf}, 1, 1, 2);
  EXPECT_EQ(Bits(r.scales[0]), 0x3b924925u);
  EXPECT_EQ(r.q, (std::vector<unsigned char>{0x7e, 0xf6}));
}

// UE8M0 scales: the block quantized as above, then as
// vllm/model_executor/layers/quantization/utils/fp8_utils.py requant_weight_ue8m0_inplace does:
// dequantize with the fp32 scale, per_block_cast_to_fp8(use_ue8m0=True) (vllm/utils/deep_gemm.py).

TEST(Fp8BlockUe8m0Test, ScaleRoundsUpAndValuesAreRequantizedFromTheFp8Values) {
  // First pass as AmaxOneRoundsThroughTheReciprocal: s = 0x3b124925, q = 0x7e (448), 0xf6 (-224)
  // and 0.3 * 447.99997 = 134.4 -> 128 (0x70). Dequantized: 448 * s = 1.0, -224 * s = -0.5,
  // 128 * s = 0.2857143. amax' 1.0 / 448 = 0.00223 lies in (2^-9, 2^-8]: scale_inv 2^-8
  // (0x3b800000), multiplier 256: 1.0 -> 256 (0x78), -0.5 -> -128 (0xf0), 0.2857 -> 73.14 ->
  // 72 (0x69). Quantizing 0.3 directly with 2^-8 would give 76.8 -> 80 (0x6a): vLLM requantizes
  // the fp8 values, not the source.
  const Quantized r = Quantize(DType::kFP32, Fp32Bytes({1.0f, -0.5f, 0.3f}), 1, 1, 3, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(r.scales[0]), 0x3b800000u);
  EXPECT_EQ(r.q, (std::vector<unsigned char>{0x78, 0xf0, 0x69}));
}

TEST(Fp8BlockUe8m0Test, PowerOfTwoScalesKeepTheFirstQuantization) {
  // amax 448: s = 1, already a power of two, so the requantization is the identity (as
  // AmaxOf448GivesScaleOneAndThePlainCast). amax 7: s = 7 / 448 = 2^-6 exactly, q 0x7e, 0x74 (3
  // * 64 = 192), 0xb2 (-0.01 * 64 = -0.64 -> -0.625); dequantized 7, 3, -0.009765625 give
  // amax' 7 again: scale 2^-6 (0x3c800000) and the same codes.
  const Quantized a = Quantize(DType::kFP32, Fp32Bytes({448.0f, -1.0f, 0.3f}), 1, 1, 3, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(a.scales[0]), Bits(1.0f));
  EXPECT_EQ(a.q, (std::vector<unsigned char>{0x7e, 0xb8, 0x2a}));
  const Quantized b = Quantize(DType::kFP32, Fp32Bytes({7.0f, 3.0f, -0.01f}), 1, 1, 3, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(b.scales[0]), 0x3c800000u);
  EXPECT_EQ(b.q, (std::vector<unsigned char>{0x7e, 0x74, 0xb2}));
}

TEST(Fp8BlockUe8m0Test, ZeroNaNAndInfinityBlocks) {
  // All zero: amax' 0 clamps to 1e-4, 1e-4 / 448 = 2.23e-7 in (2^-23, 2^-22]: 2^-22 (0x34800000);
  // -0 keeps its sign.
  const Quantized z = Quantize(DType::kFP32, Fp32Bytes({0.0f, -0.0f}), 1, 1, 2, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(z.scales[0]), 0x34800000u);
  EXPECT_EQ(z.q, (std::vector<unsigned char>{0x00, 0x80}));
  const float inf = __builtin_inff(), nan = __builtin_nanf("");
  // NaN: NaN scale, NaN codes, as before.
  const Quantized n = Quantize(DType::kFP32, Fp32Bytes({nan, 1.0f}), 1, 1, 2, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(n.scales[0]), 0x7fc00000u);
  EXPECT_EQ(n.q, (std::vector<unsigned char>{0x7f, 0x7f}));
  // inf: the first pass gives s = inf, q NaN and 0; dequantized NaN * inf and 0 * inf are both
  // NaN, so the block becomes a NaN block.
  const Quantized i = Quantize(DType::kFP32, Fp32Bytes({inf, 1.0f}), 1, 1, 2, Fp8ScaleFormat::kUe8m0);
  EXPECT_EQ(Bits(i.scales[0]), 0x7fc00000u);
  EXPECT_EQ(i.q, (std::vector<unsigned char>{0x7f, 0x7f}));
}

TEST(Fp8BlockUe8m0Test, CeilPow2RoundsUpExactly) {
  EXPECT_EQ(Bits(Fp8BlockCeilPow2(1.0f)), Bits(1.0f));
  EXPECT_EQ(Bits(Fp8BlockCeilPow2(1.0000001f)), Bits(2.0f));  // one ulp above 1
  EXPECT_EQ(Bits(Fp8BlockCeilPow2(0.75f)), Bits(1.0f));
  EXPECT_EQ(Bits(Fp8BlockCeilPow2(__builtin_inff())), 0x7f800000u);
  EXPECT_EQ(Bits(Fp8BlockCeilPow2(__builtin_nanf(""))), 0x7fc00000u);
}

// A block's amax' is taken as float(e4m3fn(amax * multiplier)) * s (fp8_block.h): on random
// bf16 blocks of many magnitudes, the maximum over every dequantized element gives the same scale.
TEST(Fp8BlockUe8m0Test, ShortcutAmaxEqualsTheElementwiseMaximum) {
  uint32_t state = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<unsigned char> src(2 * 64);
    for (size_t i = 0; i < 64; ++i) {
      state = state * 1664525u + 1013904223u;
      const uint16_t exp = static_cast<uint16_t>(100 + (trial % 60));  // 2^-27 .. 2^32
      const uint16_t v = static_cast<uint16_t>((state >> 16 & 0x807f) | (exp - (state >> 8 & 7)) << 7);
      src[2 * i] = static_cast<unsigned char>(v);
      src[2 * i + 1] = static_cast<unsigned char>(v >> 8);
    }
    const Quantized r = Quantize(DType::kBF16, src, 1, 8, 8, Fp8ScaleFormat::kUe8m0);
    const Quantized plain = Quantize(DType::kBF16, src, 1, 8, 8);
    float amax = 0.0f;
    for (unsigned char q : plain.q) {
      const float w = SmallToFloat(q, kE4M3Format) * plain.scales[0];
      amax = w < 0 ? (-w > amax ? -w : amax) : (w > amax ? w : amax);
    }
    EXPECT_EQ(Bits(r.scales[0]), Bits(Fp8BlockCeilPow2((amax < 1e-4f ? 1e-4f : amax) / 448.0f))) << trial;
    EXPECT_EQ(Bits(r.scales[0]) & 0x7fffffu, 0u) << trial;
  }
}

// Disjoint block ranges (what several threads run) give the bytes of one whole call.
TEST(Fp8BlockTest, BlockRangesComposeToTheWholeMatrices) {
  const int64_t matrices = 2, rows = 300, cols = 200;
  std::vector<float> v(static_cast<size_t>(matrices * rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 2654435761u) % 1000) / 97.0f - 5.0f;
  for (Fp8ScaleFormat fmt : {Fp8ScaleFormat::kFloat32, Fp8ScaleFormat::kUe8m0}) {
    const Quantized whole = Quantize(DType::kFP32, Fp32Bytes(v), matrices, rows, cols, fmt);
    const int64_t blocks = Fp8BlockCount(matrices, rows, cols);
    ASSERT_EQ(blocks, 12);
    Quantized parts{std::vector<unsigned char>(whole.q.size(), 0xaa), std::vector<float>(whole.scales.size(), -1.0f)};
    const std::vector<unsigned char> src = Fp32Bytes(v);
    for (int64_t first : {7, 0, 5}) {
      const int64_t end = first == 7 ? blocks : first == 0 ? 5 : 7;
      Fp8BlockQuantizeBlocks(DType::kFP32, src.data(), rows, cols, parts.q.data(), parts.scales.data(), fmt,
                             first, end);
    }
    EXPECT_EQ(parts.q, whole.q);
    EXPECT_EQ(parts.scales, whole.scales);
  }
}

}  // namespace
}  // namespace ferry
