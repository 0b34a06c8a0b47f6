// fp8_packed_scales: UE8M0 scales packed as DeepGEMM keeps them on SM100, on matrices whose block
// scales are known by hand. Expected words are worked from deepseek-ai/DeepGEMM
// deep_gemm/include/deep_gemm/impls/smxx_layout.cuh transpose_and_pack_fp32_into_ue8m0
// (word = s[4p] >> 23 | s[4p+1] >> 15 | s[4p+2] >> 7 | s[4p+3] << 1, stored at p * N4 + n) after
// csrc/apis/layout.hpp transform_sf_into_required_layout repeats each block row's scales for its
// weight rows (index_select of arange(mn) / 128), and csrc/jit_kernels/impls/smxx_layout.hpp
// get_mn_major_tma_aligned_packed_ue8m0_tensor (int32 [G, N, ceil(S/4)], strides
// [ceil(S/4) * N4, 1, N4], N4 = N aligned to 4). The copy vLLM 0.33.0 bundles (DeepGEMM 2.8.1,
// vllm/third_party/deep_gemm/include/deep_gemm/impls/smxx_layout.cuh) packs and places words alike.
#include "core/base/fp8_packed_scales.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/base/fp8_block.h"

namespace ferry {
namespace {

// `matrices` [rows, cols] fp32 matrices, every element of block (m, br, bc) value(m, br, bc).
template <typename ValueFn>
std::vector<unsigned char> BlockConstant(int64_t matrices, int64_t rows, int64_t cols, ValueFn value) {
  std::vector<unsigned char> out(static_cast<size_t>(matrices * rows * cols * 4));
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = value(m, r / 128, c / 128);
        std::memcpy(out.data() + ((m * rows + r) * cols + c) * 4, &v, 4);
      }
    }
  }
  return out;
}

// The packed scale words of `matrices` [rows, cols] matrices, every byte first set to 0xaa so
// that a byte left unwritten shows. Quantized in two block ranges, as two threads would.
std::vector<uint32_t> PackedWords(const std::vector<unsigned char>& src, int64_t matrices, int64_t rows,
                                  int64_t cols, std::vector<unsigned char>* q = nullptr) {
  const int64_t bytes = matrices * Fp8ScaleMatrixBytes(Fp8ScaleFormat::kUe8m0Packed, rows, cols);
  std::vector<unsigned char> scales(static_cast<size_t>(bytes), 0xaa);
  std::vector<unsigned char> values(static_cast<size_t>(matrices * rows * cols), 0xaa);
  const int64_t blocks = Fp8BlockCount(matrices, rows, cols);
  for (auto [first, end] : {std::pair<int64_t, int64_t>{blocks / 2, blocks}, {0, blocks / 2}}) {
    Fp8BlockQuantizeBlocks(DType::kFP32, src.data(), rows, cols, values.data(), scales.data(),
                           Fp8ScaleFormat::kUe8m0Packed, first, end);
  }
  if (q != nullptr) *q = values;
  std::vector<uint32_t> words(static_cast<size_t>(bytes / 4));
  std::memcpy(words.data(), scales.data(), static_cast<size_t>(bytes));
  return words;
}

TEST(Fp8PackedScalesTest, SizesAreDeepGemmsTensors) {
  // S = 5 scales a row, P = 2 words, N4 = 132: 264 words.
  EXPECT_EQ(Fp8ScaleMatrixBytes(Fp8ScaleFormat::kUe8m0Packed, 130, 640), 264 * 4);
  // DeepSeek-V3's q_b_proj at tp 1 [24576, 1536]: S = 12, P = 3, 3 * 24576 words.
  EXPECT_EQ(Fp8ScaleMatrixBytes(Fp8ScaleFormat::kUe8m0Packed, 24576, 1536), 3 * 24576 * 4);
  // The fp32 formats: one fp32 a block.
  EXPECT_EQ(Fp8ScaleMatrixBytes(Fp8ScaleFormat::kUe8m0, 130, 640), 2 * 5 * 4);
  EXPECT_EQ(Fp8ScaleMatrixBytes(Fp8ScaleFormat::kFloat32, 130, 640), 2 * 5 * 4);
}

TEST(Fp8PackedScalesTest, WordsHoldFourBlockColumnsPerWeightRowMnMajor) {
  // Block (br, bc) holds 448 * 2^e, e = -(1 + bc + 5 br): the first pass gives scale 2^e exactly
  // and codes 448 (0x7e); dequantized they are the values again, so the UE8M0 scale is 2^e, E8M0
  // code 127 + e: block row 0 0x7e 0x7d 0x7c 0x7b 0x7a, block row 1 0x79 0x78 0x77 0x76 0x75.
  const auto value = [](int64_t, int64_t br, int64_t bc) {
    return 448.0f * std::ldexp(1.0f, static_cast<int>(-(1 + bc + 5 * br)));
  };
  std::vector<unsigned char> q;
  const std::vector<uint32_t> w = PackedWords(BlockConstant(1, 130, 640, value), 1, 130, 640, &q);
  ASSERT_EQ(w.size(), 264u);
  for (int64_t n = 0; n < 132; ++n) {
    // Word (n, p) at p * 132 + n: rows 0..127 the first block row's codes, 128..129 the
    // second's, 130..131 padding (0); word 1 holds block column 4 and three zero bytes.
    const uint32_t p0 = n < 128 ? 0x7b7c7d7eu : n < 130 ? 0x76777879u : 0u;
    const uint32_t p1 = n < 128 ? 0x7au : n < 130 ? 0x75u : 0u;
    EXPECT_EQ(w[static_cast<size_t>(n)], p0) << "row " << n;
    EXPECT_EQ(w[static_cast<size_t>(132 + n)], p1) << "row " << n;
  }
  EXPECT_EQ(q, std::vector<unsigned char>(130 * 640, 0x7e));
}

TEST(Fp8PackedScalesTest, MatricesZeroAndNaNBlocks) {
  // Two [3, 200] matrices: S = 2, P = 1, N4 = 4, a matrix every 4 words. Matrix 0: block 0 all
  // zero (scale 2^-22, code 0x69), block 1 holding a NaN (0xff, E8M0's NaN). Matrix 1: 448 * 2^3
  // (0x82) and 448 * 2^-20 (0x6b). Row 3 of each matrix is padding.
  std::vector<unsigned char> src = BlockConstant(2, 3, 200, [](int64_t m, int64_t, int64_t bc) {
    if (m == 0) return bc == 0 ? 0.0f : 1.0f;
    return bc == 0 ? 3584.0f : 448.0f * std::ldexp(1.0f, -20);
  });
  const float nan = __builtin_nanf("");
  std::memcpy(src.data() + (1 * 200 + 150) * 4, &nan, 4);
  const std::vector<uint32_t> w = PackedWords(src, 2, 3, 200);
  EXPECT_EQ(w, (std::vector<uint32_t>{0xff69u, 0xff69u, 0xff69u, 0, 0x6b82u, 0x6b82u, 0x6b82u, 0}));
}

TEST(Fp8PackedScalesTest, ValuesAndScalesAreUe8m0s) {
  // The packed format requantizes as kUe8m0 (tests/core/base/fp8_block_test.cc: {1, -0.5, 0.3}
  // gives scale 2^-8 and codes 0x78 0xf0 0x69): one row, one word, code 127 - 8 = 0x77, padding
  // rows 1..3 zero.
  const float v[3] = {1.0f, -0.5f, 0.3f};
  std::vector<unsigned char> src(12);
  std::memcpy(src.data(), v, 12);
  std::vector<unsigned char> q;
  EXPECT_EQ(PackedWords(src, 1, 1, 3, &q), (std::vector<uint32_t>{0x77u, 0, 0, 0}));
  EXPECT_EQ(q, (std::vector<unsigned char>{0x78, 0xf0, 0x69}));
}

}  // namespace
}  // namespace ferry
