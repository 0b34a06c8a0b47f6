// The block-quantize kernel on a GPU: bf16, fp16 and fp32 stacks of matrices with partial edge
// blocks, at odd byte offsets (the byte walk) and aligned (the vector walk), several jobs in one launch, blocks of very different magnitudes
// (down to the subnormal range), an all-zero block, and blocks holding ±inf or NaN, with float32
// and UE8M0 scales, fp32 or packed as DeepGEMM on SM100; fp8 values and scales must equal the CPU
// reference (core/base/fp8_block.h) bit for bit, and hand-worked UE8M0 blocks their expected
// codes; so must a stack quantized as rectangles of blocks read from other buffers. Without a GPU each test reports itself SKIPPED.
#include "core/cuda/block_quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/fp8_block.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {
namespace {

// [matrices, rows, cols] of `dtype`: every 128x128 block gets its own magnitude 2^e (e from -130,
// subnormal for fp32 and bf16, to 20); block 0 is all zero, block 1 holds -inf, block 2 a NaN,
// block 3 a subnormal of the dtype beside zeros (where the first block row has 4 blocks).
std::vector<unsigned char> Matrices(DType dtype, int64_t matrices, int64_t rows, int64_t cols,
                                    std::mt19937& rng) {
  const int64_t elem = DTypeSize(dtype), bc = (cols + 127) / 128;
  std::vector<unsigned char> bytes(static_cast<size_t>(matrices * rows * cols * elem));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<int> exps;
  const int64_t blocks = matrices * ((rows + 127) / 128) * bc;
  for (int64_t b = 0; b < blocks; ++b) exps.push_back(static_cast<int>(rng() % 151) - 130);
  for (int64_t i = 0; i < matrices * rows * cols; ++i) {
    const int64_t m = i / (rows * cols), r = i % (rows * cols) / cols, c = i % cols;
    const int64_t b = (m * ((rows + 127) / 128) + r / 128) * bc + c / 128;
    float v = std::ldexp(unit(rng), exps[static_cast<size_t>(b)]);
    if (b == 0 || b == 3) v = 0.0f;
    StoreFromFloat(dtype, bytes.data() + i * elem, v);
  }
  if (cols <= 3 * 128) return bytes;  // the special blocks need 4 blocks in the first block row
  StoreFromFloat(dtype, bytes.data() + 1 * 128 * elem + 5 * elem, -INFINITY);
  StoreFromFloat(dtype, bytes.data() + 2 * 128 * elem + 7 * elem, NAN);
  bytes[static_cast<size_t>(3 * 128 * elem)] = 1;  // the smallest positive subnormal
  return bytes;
}

// Every case in one launch with scales of format `fmt`, compared with the CPU reference.
void ExpectTheCpuReference(Fp8ScaleFormat fmt) {
  std::mt19937 rng(23);
  struct Case {
    DType dtype;
    int64_t matrices, rows, cols, offset;
    bool vector;  // BlockQuantizeVectorWalks
    std::vector<unsigned char> src;
    void *dsrc = nullptr, *ddst = nullptr, *dscales = nullptr;
  };
  // Odd offsets, or columns not a multiple of 16, take the kernel's byte walk; the others its
  // vector walk, partial edge blocks included.
  std::vector<Case> cases = {{DType::kBF16, 3, 300, 515, 1, false, {}},
                             {DType::kFP16, 1, 129, 700, 3, false, {}},
                             {DType::kFP32, 2, 256, 384, 0, true, {}},
                             {DType::kBF16, 1, 7, 9, 5, false, {}},
                             {DType::kBF16, 2, 300, 528, 0, true, {}},
                             {DType::kBF16, 1, 130, 520, 0, false, {}},
                             {DType::kFP16, 1, 129, 144, 0, true, {}},
                             {DType::kFP32, 1, 200, 272, 0, true, {}},
                             {DType::kBF16, 1, 3, 16, 0, true, {}}};
  std::vector<BlockQuantizeJob> jobs;
  for (Case& c : cases) {
    c.src = Matrices(c.dtype, c.matrices, c.rows, c.cols, rng);
    const int64_t n = c.matrices * c.rows * c.cols;
    const int64_t scale_bytes = c.matrices * Fp8ScaleMatrixBytes(fmt, c.rows, c.cols);
    Result<void*> s = DeviceAlloc(static_cast<int64_t>(c.src.size()) + c.offset);
    Result<void*> d = DeviceAlloc(n + c.offset);
    Result<void*> k = DeviceAlloc(scale_bytes);
    ASSERT_TRUE(s.ok() && d.ok() && k.ok());
    c.dsrc = *s;
    c.ddst = *d;
    c.dscales = *k;
    ASSERT_TRUE(CopyToDevice(static_cast<char*>(c.dsrc) + c.offset, c.src.data(),
                             static_cast<int64_t>(c.src.size())).ok());
    const std::vector<unsigned char> unwritten(static_cast<size_t>(scale_bytes), 0xaa);
    ASSERT_TRUE(CopyToDevice(c.dscales, unwritten.data(), scale_bytes).ok());
    jobs.push_back({static_cast<char*>(c.dsrc) + c.offset, static_cast<char*>(c.ddst) + c.offset,
                    c.dscales, c.dtype, c.matrices, c.rows, c.cols, fmt});
    const BlockQuantizeRect whole{jobs.back().src, c.cols * DTypeSize(c.dtype), jobs.back().dst, c.dscales,
                                  c.dtype, fmt, c.rows, c.cols, 0, 0, (c.rows + 127) / 128, 0,
                                  (c.cols + 127) / 128};
    EXPECT_EQ(BlockQuantizeVectorWalks(whole), c.vector) << DTypeName(c.dtype) << " " << c.rows << "x" << c.cols;
  }
  ASSERT_TRUE(LaunchBlockQuantize(jobs, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  for (const Case& c : cases) {
    const int64_t n = c.matrices * c.rows * c.cols;
    const int64_t words = c.matrices * Fp8ScaleMatrixBytes(fmt, c.rows, c.cols) / 4;
    std::vector<unsigned char> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::vector<uint32_t> want_scales(static_cast<size_t>(words)), got_scales(static_cast<size_t>(words));
    Fp8BlockQuantizeMatrices(c.dtype, c.src.data(), c.matrices, c.rows, c.cols, want.data(),
                             want_scales.data(), fmt);
    ASSERT_TRUE(CopyToHost(got.data(), static_cast<char*>(c.ddst) + c.offset, n).ok());
    ASSERT_TRUE(CopyToHost(got_scales.data(), c.dscales, words * 4).ok());
    for (int64_t w = 0; w < words; ++w) {
      ASSERT_EQ(want_scales[static_cast<size_t>(w)], got_scales[static_cast<size_t>(w)])
          << DTypeName(c.dtype) << " scale word " << w;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(want[static_cast<size_t>(i)], got[static_cast<size_t>(i)]) << DTypeName(c.dtype) << " element " << i;
    }
    EXPECT_TRUE(DeviceFree(c.dsrc).ok());
    EXPECT_TRUE(DeviceFree(c.ddst).ok());
    EXPECT_TRUE(DeviceFree(c.dscales).ok());
  }
}

TEST(BlockQuantizeTest, MatchesTheCpuReferenceBitForBit) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  ExpectTheCpuReference(Fp8ScaleFormat::kFloat32);
}

TEST(BlockQuantizeTest, Ue8m0MatchesTheCpuReferenceBitForBit) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  ExpectTheCpuReference(Fp8ScaleFormat::kUe8m0);
}

TEST(BlockQuantizeTest, Ue8m0PackedMatchesTheCpuReferenceBitForBit) {
  // DeepGEMM's SM100 codes (core/base/fp8_packed_scales.h): rows 300, 129 and 7 leave padding
  // rows, 515, 700 and 9 columns partial words; every scale byte, padding included, is compared.
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  ExpectTheCpuReference(Fp8ScaleFormat::kUe8m0Packed);
}

TEST(BlockQuantizeTest, Ue8m0PackedHandWorkedBlock) {
  // tests/core/base/fp8_packed_scales_test.cc ValuesAndScalesAreUe8m0s: {1, -0.5, 0.3} gives
  // scale 2^-8, E8M0 code 0x77 in byte 0 of row 0's word; rows 1..3 are padding, written 0.
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  const float src[3] = {1.0f, -0.5f, 0.3f};
  const std::vector<unsigned char> unwritten(16, 0xaa);
  Result<void*> s = DeviceAlloc(12), d = DeviceAlloc(3), k = DeviceAlloc(16);
  ASSERT_TRUE(s.ok() && d.ok() && k.ok());
  ASSERT_TRUE(CopyToDevice(*s, src, 12).ok());
  ASSERT_TRUE(CopyToDevice(*k, unwritten.data(), 16).ok());
  ASSERT_TRUE(
      LaunchBlockQuantize({{*s, *d, *k, DType::kFP32, 1, 1, 3, Fp8ScaleFormat::kUe8m0Packed}}, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  unsigned char q[3];
  uint32_t words[4] = {};
  ASSERT_TRUE(CopyToHost(q, *d, 3).ok());
  ASSERT_TRUE(CopyToHost(words, *k, 16).ok());
  EXPECT_EQ(std::vector<uint32_t>(words, words + 4), (std::vector<uint32_t>{0x77u, 0, 0, 0}));
  EXPECT_EQ(std::vector<unsigned char>(q, q + 3), (std::vector<unsigned char>{0x78, 0xf0, 0x69}));
  for (void* p : {*s, *d, *k}) EXPECT_TRUE(DeviceFree(p).ok());
}

TEST(BlockQuantizeTest, Ue8m0HandWorkedBlock) {
  // tests/core/base/fp8_block_test.cc Fp8BlockUe8m0Test: {1, -0.5, 0.3} as vLLM's
  // requant_weight_ue8m0_inplace leaves it (vllm/model_executor/layers/quantization/utils/
  // fp8_utils.py): scale_inv 2^-8, codes 0x78, 0xf0, 0x69.
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  const float src[3] = {1.0f, -0.5f, 0.3f};
  Result<void*> s = DeviceAlloc(12), d = DeviceAlloc(3), k = DeviceAlloc(4);
  ASSERT_TRUE(s.ok() && d.ok() && k.ok());
  ASSERT_TRUE(CopyToDevice(*s, src, 12).ok());
  ASSERT_TRUE(LaunchBlockQuantize({{*s, *d, *k, DType::kFP32, 1, 1, 3, Fp8ScaleFormat::kUe8m0}}, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  unsigned char q[3];
  uint32_t scale = 0;
  ASSERT_TRUE(CopyToHost(q, *d, 3).ok());
  ASSERT_TRUE(CopyToHost(&scale, *k, 4).ok());
  EXPECT_EQ(scale, 0x3b800000u);
  EXPECT_EQ(std::vector<unsigned char>(q, q + 3), (std::vector<unsigned char>{0x78, 0xf0, 0x69}));
  for (void* p : {*s, *d, *k}) EXPECT_TRUE(DeviceFree(p).ok());
}

// A stack quantized as rectangles of blocks read from elsewhere, as quantizing direct reads and
// the Quantize op that finishes their matrix do: [2, 300, 528] bf16 (3 block rows, 5 block
// columns, the last 16 wide); matrix 0's block row 0 from a copy whose rows are 1072 bytes apart
// (the vector walk), block rows 1-2 of its columns 0-255 from one 1041 bytes apart (the byte walk)
// and of its columns 256-527 from one 544 bytes apart, matrix 1 whole from the dense stack; UE8M0
// packed scales, whose words mix a matrix's rows, included. The values and scales must equal the
// CPU reference of the whole stack.
void ExpectRectsEqualTheWholeStack(Fp8ScaleFormat fmt) {
  std::mt19937 rng(29);
  const int64_t matrices = 2, rows = 300, cols = 528, row_bytes = cols * 2;
  const std::vector<unsigned char> stack = Matrices(DType::kBF16, matrices, rows, cols, rng);
  const int64_t n = matrices * rows * cols, scale_bytes = matrices * Fp8ScaleMatrixBytes(fmt, rows, cols);
  struct Source {
    int64_t first_row, num_rows, first_col, num_cols, pitch;
    void* at = nullptr;  // the allocation; its rows start `shift` bytes in
    int64_t shift = 0;
    const char* rows() const { return static_cast<const char*>(at) + shift; }
  };
  std::vector<Source> sources = {{0, 128, 0, 528, 1072}, {128, 172, 0, 256, 1041}, {128, 172, 256, 272, 544}};
  for (Source& src : sources) {
    std::vector<unsigned char> rows_out(static_cast<size_t>(src.num_rows * src.pitch), 0x5a);
    for (int64_t r = 0; r < src.num_rows; ++r) {
      std::memcpy(rows_out.data() + r * src.pitch, stack.data() + (src.first_row + r) * row_bytes + src.first_col * 2,
                  static_cast<size_t>(src.num_cols * 2));
    }
    Result<void*> at = DeviceAlloc(static_cast<int64_t>(rows_out.size()) + 1);
    ASSERT_TRUE(at.ok());
    src.at = *at;
    src.shift = src.pitch % 16 == 0 ? 0 : 1;
    ASSERT_TRUE(CopyToDevice(static_cast<char*>(src.at) + src.shift, rows_out.data(),
                             static_cast<int64_t>(rows_out.size())).ok());
  }
  Result<void*> dense = DeviceAlloc(static_cast<int64_t>(stack.size()));
  Result<void*> dst = DeviceAlloc(n), scales = DeviceAlloc(scale_bytes);
  ASSERT_TRUE(dense.ok() && dst.ok() && scales.ok());
  ASSERT_TRUE(CopyToDevice(*dense, stack.data(), static_cast<int64_t>(stack.size())).ok());
  const std::vector<unsigned char> unwritten(static_cast<size_t>(scale_bytes), 0xaa);
  ASSERT_TRUE(CopyToDevice(*scales, unwritten.data(), scale_bytes).ok());
  auto rect = [&](const void* src, int64_t pitch, int64_t m, int64_t block_row, int64_t block_rows,
                  int64_t block_col, int64_t block_cols) {
    return BlockQuantizeRect{src,  pitch, *dst,      *scales,    DType::kBF16, fmt,       rows,
                             cols, m,     block_row, block_rows, block_col,    block_cols};
  };
  const std::vector<BlockQuantizeRect> rects = {
      rect(static_cast<char*>(*dense) + rows * row_bytes, row_bytes, 1, 0, 3, 0, 5),
      rect(sources[1].rows(), 1041, 0, 1, 2, 0, 2), rect(sources[2].rows(), 544, 0, 1, 2, 2, 3),
      rect(sources[0].rows(), 1072, 0, 0, 1, 0, 5)};
  EXPECT_EQ((std::vector<bool>{BlockQuantizeVectorWalks(rects[0]), BlockQuantizeVectorWalks(rects[1]),
                               BlockQuantizeVectorWalks(rects[2]), BlockQuantizeVectorWalks(rects[3])}),
            (std::vector<bool>{true, false, true, true}));
  ASSERT_TRUE(LaunchBlockQuantizeRects(rects, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  std::vector<unsigned char> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  std::vector<uint32_t> want_scales(static_cast<size_t>(scale_bytes / 4)), got_scales(want_scales.size());
  Fp8BlockQuantizeMatrices(DType::kBF16, stack.data(), matrices, rows, cols, want.data(),
                           want_scales.data(), fmt);
  ASSERT_TRUE(CopyToHost(got.data(), *dst, n).ok());
  ASSERT_TRUE(CopyToHost(got_scales.data(), *scales, scale_bytes).ok());
  EXPECT_EQ(want_scales, got_scales);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(want[static_cast<size_t>(i)], got[static_cast<size_t>(i)]) << "element " << i;
  for (void* p : {sources[0].at, sources[1].at, sources[2].at, *dense, *dst, *scales}) EXPECT_TRUE(DeviceFree(p).ok());
}

TEST(BlockQuantizeTest, RectanglesFromElsewhereEqualTheWholeStack) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  ExpectRectsEqualTheWholeStack(Fp8ScaleFormat::kFloat32);
  ExpectRectsEqualTheWholeStack(Fp8ScaleFormat::kUe8m0Packed);
}

TEST(BlockQuantizeTest, ARectangleOutsideItsMatrixIsAnErrorNamingIt) {
  BlockQuantizeRect b;
  b.rows = 300;
  b.cols = 300;
  b.src_pitch = 600;
  b.block_row = 2;
  b.block_rows = 2;
  b.block_cols = 3;
  Status s = LaunchBlockQuantizeRects({b}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("block rows [2, 4) outside a matrix of 3"), std::string::npos) << s.ToString();
  b.block_rows = 1;
  b.block_col = 1;
  s = LaunchBlockQuantizeRects({b}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("block columns [1, 4) outside a matrix of 3"), std::string::npos) << s.ToString();
  b.block_cols = 2;
  b.src_pitch = 343;  // columns 128-299: 344 bytes a row
  s = LaunchBlockQuantizeRects({b}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("pitch 343 bytes is shorter than its rows"), std::string::npos) << s.ToString();
}

TEST(BlockQuantizeTest, UnsupportedDtypeIsAnErrorNamingIt) {
  BlockQuantizeJob j;
  j.src_dtype = DType::kFP8E4M3;
  j.rows = j.cols = 4;
  Status s = LaunchBlockQuantize({j}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("fp8_e4m3"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ferry::cuda
