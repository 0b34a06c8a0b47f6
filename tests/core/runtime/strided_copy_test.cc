// Strided copy: geometry simplification, slicing, and exact results for strided, transposed-stride
// and converting copies.
#include "core/runtime/strided_copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/base/float_convert.h"

namespace ferry {
namespace {

Region R(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset = 0) {
  Region r;
  r.space = Space::kSource;
  r.dtype = dtype;
  r.offset = offset;
  r.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = shape[d];
    r.strides[d] = strides[d];
  }
  return r;
}

void RunAll(const CopyGeometry& g, const char* from, char* to, int64_t target, int slices) {
  for (const CopySlice& s : SliceCopy(g, target, slices)) ASSERT_TRUE(RunCopySlice(g, s, from, to).ok());
}

TEST(StridedCopyTest, DenseRegionsCollapseToOneRunAndSplitByBytes) {
  auto g = MakeCopyGeometry(R(DType::kFP32, {4, 8, 16}, {128, 16, 1}), R(DType::kFP32, {4, 8, 16}, {128, 16, 1}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 1);
  EXPECT_EQ(g->run, 512);
  EXPECT_TRUE(g->contiguous_run());
  auto slices = SliceCopy(*g, 512, 8);
  EXPECT_EQ(slices.size(), 4u);
  std::vector<float> a(512), b(512, 0);
  std::iota(a.begin(), a.end(), 0.f);
  RunAll(*g, reinterpret_cast<char*>(a.data()), reinterpret_cast<char*>(b.data()), 512, 8);
  EXPECT_EQ(a, b);
}

TEST(StridedCopyTest, PackColumnsOfAMatrixAndUnpackThemBack) {
  // Columns [3, 7) of a 5x10 int32 matrix -> a dense 5x4 block, then back into a zeroed matrix.
  std::vector<int32_t> m(50), packed(20, -1), back(50, 0);
  std::iota(m.begin(), m.end(), 0);
  auto pack = MakeCopyGeometry(R(DType::kInt32, {5, 4}, {10, 1}), R(DType::kInt32, {5, 4}, {4, 1}));
  ASSERT_TRUE(pack.ok());
  EXPECT_EQ(pack->rows, 5);
  RunAll(*pack, reinterpret_cast<char*>(m.data() + 3), reinterpret_cast<char*>(packed.data()), 16, 3);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(packed[r * 4 + c], r * 10 + 3 + c);
  }
  auto unpack = MakeCopyGeometry(R(DType::kInt32, {5, 4}, {4, 1}), R(DType::kInt32, {5, 4}, {10, 1}));
  RunAll(*unpack, reinterpret_cast<char*>(packed.data()), reinterpret_cast<char*>(back.data() + 3), 1 << 20, 1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(back[i], (i % 10 >= 3 && i % 10 < 7) ? i : 0) << i;
}

TEST(StridedCopyTest, ElementStridedInnerDimension) {
  // Every other element of a 3x6 bf16-sized matrix (inner stride 2) into a dense 3x3 block.
  std::vector<uint16_t> m(18), out(9);
  std::iota(m.begin(), m.end(), 100);
  auto g = MakeCopyGeometry(R(DType::kBF16, {3, 3}, {6, 2}), R(DType::kBF16, {3, 3}, {3, 1}));
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->contiguous_run());
  RunAll(*g, reinterpret_cast<char*>(m.data()), reinterpret_cast<char*>(out.data()), 2, 4);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[r * 3 + c], 100 + r * 6 + c * 2);
  }
}

TEST(StridedCopyTest, ConvertsFp32ToBf16AndFp16) {
  std::vector<float> values = {1.0f, -2.5f, 3.14159f, 65504.0f, 0.0f, 1e-3f};
  std::vector<uint16_t> bf(values.size()), half(values.size());
  std::vector<float> round_trip(values.size());
  int64_t n = static_cast<int64_t>(values.size());
  auto to_bf = MakeCopyGeometry(R(DType::kFP32, {n}, {1}), R(DType::kBF16, {n}, {1}));
  auto to_half = MakeCopyGeometry(R(DType::kFP32, {n}, {1}), R(DType::kFP16, {n}, {1}));
  auto from_half = MakeCopyGeometry(R(DType::kFP16, {n}, {1}), R(DType::kFP32, {n}, {1}));
  ASSERT_TRUE(to_bf.ok() && to_half.ok() && from_half.ok());
  RunAll(*to_bf, reinterpret_cast<char*>(values.data()), reinterpret_cast<char*>(bf.data()), 1 << 20, 1);
  RunAll(*to_half, reinterpret_cast<char*>(values.data()), reinterpret_cast<char*>(half.data()), 1 << 20, 1);
  RunAll(*from_half, reinterpret_cast<char*>(half.data()), reinterpret_cast<char*>(round_trip.data()), 1 << 20, 1);
  EXPECT_EQ(bf[0], 0x3f80);  // 1.0
  EXPECT_EQ(bf[1], 0xc020);  // -2.5
  EXPECT_EQ(half[0], 0x3c00);
  EXPECT_EQ(half[3], 0x7bff);  // 65504, the largest half
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(round_trip[i], values[i], std::abs(values[i]) * 1e-3 + 1e-6);
}

// An element function (vLLM's Mamba A = -exp(A_log)) applies to every element, also between two
// fp32 regions of one layout (no memcpy fast path), dense or strided; it only reads wide floats.
TEST(StridedCopyTest, NegExpAppliesToEveryElementOfDenseAndStridedCopies) {
  const std::vector<float> a_log = {0.0f, 1.0f, -2.0f, INFINITY, -INFINITY, 0.5f};
  const int64_t n = static_cast<int64_t>(a_log.size());
  std::vector<float> dense(a_log.size()), strided(2 * a_log.size(), 7.0f);
  auto g = MakeCopyGeometry(R(DType::kFP32, {n}, {1}), R(DType::kFP32, {n}, {1}), ElementFn::kNegExp);
  auto h = MakeCopyGeometry(R(DType::kFP32, {2, n / 2}, {n / 2, 1}), R(DType::kFP32, {2, n / 2}, {n, 2}),
                            ElementFn::kNegExp);
  ASSERT_TRUE(g.ok() && h.ok());
  EXPECT_FALSE(g->contiguous_run());
  RunAll(*g, reinterpret_cast<const char*>(a_log.data()), reinterpret_cast<char*>(dense.data()), 1 << 20, 1);
  RunAll(*h, reinterpret_cast<const char*>(a_log.data()), reinterpret_cast<char*>(strided.data()), 8, 4);
  const uint32_t want[] = {0xbf800000u, 0xc02df854u, 0xbe0a9555u, 0xff800000u, 0x80000000u, 0xbfd3094cu};
  for (size_t i = 0; i < a_log.size(); ++i) {
    uint32_t got;
    std::memcpy(&got, &dense[i], 4);
    EXPECT_EQ(got, want[i]) << "element " << i;
    std::memcpy(&got, &strided[2 * i], 4);
    EXPECT_EQ(got, want[i]) << "strided element " << i;
    EXPECT_EQ(strided[2 * i + 1], 7.0f) << "gap " << i << " untouched";
  }
  Result<CopyGeometry> ints = MakeCopyGeometry(R(DType::kInt32, {n}, {1}), R(DType::kFP32, {n}, {1}), ElementFn::kNegExp);
  ASSERT_FALSE(ints.ok());
  EXPECT_NE(ints.status().message().find("applying neg_exp from int32 to fp32"), std::string::npos);
}

TEST(StridedCopyTest, RejectsShapeMismatch) {
  EXPECT_FALSE(MakeCopyGeometry(R(DType::kFP32, {4, 4}, {4, 1}), R(DType::kFP32, {2, 8}, {8, 1})).ok());
  EXPECT_FALSE(MakeCopyGeometry(R(DType::kFP32, {4}, {1}), R(DType::kFP32, {5}, {1})).ok());
}

// Conversions between the float dtypes give the bits of the CPU reference (ConvertElement) for
// random bit patterns (NaNs, infinities, subnormals, overflow included), from a strided source
// (every other column) into a dense destination and from a dense source into a strided one.
TEST(StridedCopyTest, FloatConversionsMatchTheReferenceOnRandomBits) {
  const DType kinds[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2};
  std::mt19937 rng(25);
  const int64_t rows = 37, cols = 53;
  for (DType from : kinds) {
    for (DType to : kinds) {
      if (from == to) continue;
      const int64_t fs = DTypeSize(from), ts = DTypeSize(to);
      for (bool strided_from : {true, false}) {
        const int64_t fstride = strided_from ? 2 : 1, tstride = strided_from ? 1 : 3;
        std::vector<unsigned char> a(static_cast<size_t>(rows * cols * fstride * fs));
        for (auto& byte : a) byte = static_cast<unsigned char>(rng());
        std::vector<unsigned char> b(static_cast<size_t>(rows * cols * tstride * ts), 0xAB);
        auto g = MakeCopyGeometry(R(from, {rows, cols}, {cols * fstride, fstride}),
                                  R(to, {rows, cols}, {cols * tstride, tstride}));
        ASSERT_TRUE(g.ok());
        RunAll(*g, reinterpret_cast<const char*>(a.data()), reinterpret_cast<char*>(b.data()), 4096, 4);
        for (int64_t e = 0; e < rows * cols; ++e) {
          unsigned char want[4];
          ConvertElement(from, to, a.data() + e * fstride * fs, want);
          ASSERT_EQ(std::memcmp(b.data() + e * tstride * ts, want, static_cast<size_t>(ts)), 0)
              << DTypeName(from) << " -> " << DTypeName(to) << " element " << e;
        }
      }
    }
  }
}

TEST(StridedCopyTest, RowsOfEveryLengthAndAlignmentCopyExactly) {
  // Short rows take inlined moves, long ones non-temporal stores with an unaligned head and tail;
  // one layer (one outer dim) and three layers with gaps between them (the odometer), destination
  // offsets 0..13 bytes. Bytes between rows must stay untouched.
  for (int64_t row_bytes : {1, 7, 8, 12, 16, 17, 24, 32, 33, 48, 64, 65, 1000, 1024, 1100, 4099}) {
    for (int64_t shift : {0, 3, 8, 13}) {
      for (int64_t layers : {1, 3}) {
        const int64_t rows = 5, from_row = row_bytes + 40, to_row = row_bytes + 24;
        const int64_t from_layer = rows * from_row + 16, to_layer = rows * to_row + 32;
        std::vector<char> from(static_cast<size_t>(layers * from_layer)),
            to(static_cast<size_t>(layers * to_layer + shift), 0), expected = to;
        for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<char>(i * 131 + 7);
        for (int64_t l = 0; l < layers; ++l) {
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(expected.data() + shift + l * to_layer + r * to_row,
                        from.data() + l * from_layer + r * from_row, static_cast<size_t>(row_bytes));
          }
        }
        auto g = MakeCopyGeometry(R(DType::kUInt8, {layers, rows, row_bytes}, {from_layer, from_row, 1}),
                                  R(DType::kUInt8, {layers, rows, row_bytes}, {to_layer, to_row, 1}));
        ASSERT_TRUE(g.ok());
        if (row_bytes > 1) {
          EXPECT_EQ(g->outer_dims, layers == 1 ? 1 : 2);
        }
        RunAll(*g, from.data(), to.data() + shift, 1 << 20, 1);
        ASSERT_EQ(to, expected) << "rows of " << row_bytes << " B, shift " << shift << ", layers " << layers;
      }
    }
  }
}

TEST(StridedCopyTest, EmptyRegionHasNoSlices) {
  auto g = MakeCopyGeometry(R(DType::kFP32, {0, 4}, {4, 1}), R(DType::kFP32, {0, 4}, {4, 1}));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(SliceCopy(*g, 16, 4).empty());
}

}  // namespace
}  // namespace ferry
