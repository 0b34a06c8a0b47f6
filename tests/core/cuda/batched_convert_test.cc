// The batched convert kernel on a GPU: every float dtype pair, strided and dense sides at odd byte
// offsets, random bit patterns (NaN, ±inf, subnormals, overflow included) plus a list of special
// values, several conversions in one launch, and rows dense and aligned (the kernel's vector
// loads); the result must equal the CPU reference (ConvertElement) bit for bit; -exp(A_log) (an
// element function) within expf's 2 ulp of the CPU reference, and the same bits from either walk.
// Without a GPU the kernel tests report themselves SKIPPED.
#include "core/cuda/batched_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/base/element_fn.h"
#include "core/base/float_convert.h"

namespace ferry::cuda {
namespace {

constexpr DType kFloats[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3,
                             DType::kFP8E5M2};

// Source bytes: random bits, with special fp32 values written over the first elements when the
// source is fp32 (and their conversions when it is narrower).
std::vector<unsigned char> SourceBytes(DType dtype, int64_t elements, std::mt19937& rng) {
  std::vector<unsigned char> bytes(static_cast<size_t>(elements * DTypeSize(dtype)));
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, 448.f, 464.f, 480.f, -1e6f,
                            57344.f, 61440.f, 65520.f, std::ldexp(1.f, -10), std::ldexp(1.f, -17),
                            std::ldexp(1.f, -25), 1e-40f, 3.140625f};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i) < elements; ++i) {
    StoreFromFloat(dtype, bytes.data() + i * DTypeSize(dtype), specials[i]);
  }
  return bytes;
}

TEST(BatchedConvertTest, EveryPairMatchesTheCpuReferenceBitForBit) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  std::mt19937 rng(25);
  const int64_t rows = 61, cols = 67;  // odd sizes: blocks end mid-row
  struct Case {
    DType from, to;
    int64_t fstride, tstride, foffset, toffset;
    std::vector<unsigned char> src;
    void* dsrc = nullptr;
    void* ddst = nullptr;
  };
  std::vector<Case> cases;
  for (DType from : kFloats) {
    for (DType to : kFloats) {
      if (from == to) continue;
      for (int strided = 0; strided < 2; ++strided) {
        Case c{from, to, strided ? 3 : 1, strided ? 1 : 2, strided ? 1 : 3, strided ? 5 : 0, {}};
        c.src = SourceBytes(from, rows * cols * c.fstride + c.foffset, rng);
        cases.push_back(std::move(c));
      }
    }
  }
  std::vector<StridedConvert> launch;
  for (Case& c : cases) {
    const int64_t fs = DTypeSize(c.from), ts = DTypeSize(c.to);
    Result<void*> dsrc = DeviceAlloc(static_cast<int64_t>(c.src.size()));
    Result<void*> ddst = DeviceAlloc(rows * cols * c.tstride * ts + c.toffset);
    ASSERT_TRUE(dsrc.ok() && ddst.ok());
    c.dsrc = *dsrc;
    c.ddst = *ddst;
    ASSERT_TRUE(CopyToDevice(c.dsrc, c.src.data(), static_cast<int64_t>(c.src.size())).ok());
    StridedConvert k;
    k.src = static_cast<const char*>(c.dsrc) + c.foffset * fs;
    k.dst = static_cast<char*>(c.ddst) + c.toffset;
    k.src_dtype = c.from;
    k.dst_dtype = c.to;
    k.ndim = 2;
    k.shape = {rows, cols};
    k.src_strides = {cols * c.fstride * fs, c.fstride * fs};
    k.dst_strides = {cols * c.tstride * ts, c.tstride * ts};
    launch.push_back(k);
  }
  ASSERT_TRUE(LaunchBatchedConvert(launch, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  for (const Case& c : cases) {
    const int64_t fs = DTypeSize(c.from), ts = DTypeSize(c.to);
    std::vector<unsigned char> got(static_cast<size_t>(rows * cols * c.tstride * ts + c.toffset));
    ASSERT_TRUE(CopyToHost(got.data(), c.ddst, static_cast<int64_t>(got.size())).ok());
    for (int64_t e = 0; e < rows * cols; ++e) {
      unsigned char want[4];
      ConvertElement(c.from, c.to, c.src.data() + (c.foffset + e * c.fstride) * fs, want);
      ASSERT_EQ(std::memcmp(got.data() + c.toffset + e * c.tstride * ts, want, static_cast<size_t>(ts)), 0)
          << DTypeName(c.from) << " -> " << DTypeName(c.to) << " element " << e;
    }
    EXPECT_TRUE(DeviceFree(c.dsrc).ok());
    EXPECT_TRUE(DeviceFree(c.ddst).ok());
  }
}

// Rows dense on both sides with aligned starts, the shape the kernel converts with vector loads
// and stores (VectorWalks): [2, 19, 64] elements read from rows 80 elements apart into a dense
// destination, every float pair, random bits and special values, one launch; bit for bit the CPU
// reference.
TEST(BatchedConvertTest, AlignedDenseRowsMatchTheCpuReferenceBitForBit) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  std::mt19937 rng(27);
  const int64_t planes = 2, rows = 19, cols = 64, pitch = 80;
  struct Case {
    DType from, to;
    std::vector<unsigned char> src;
    void* dsrc = nullptr;
    void* ddst = nullptr;
  };
  std::vector<Case> cases;
  std::vector<StridedConvert> launch;
  for (DType from : kFloats) {
    for (DType to : kFloats) {
      if (from == to) continue;
      Case c{from, to, SourceBytes(from, planes * rows * pitch, rng)};
      const int64_t fs = DTypeSize(from), ts = DTypeSize(to);
      Result<void*> dsrc = DeviceAlloc(static_cast<int64_t>(c.src.size()));
      Result<void*> ddst = DeviceAlloc(planes * rows * cols * ts);
      ASSERT_TRUE(dsrc.ok() && ddst.ok());
      c.dsrc = *dsrc;
      c.ddst = *ddst;
      ASSERT_TRUE(CopyToDevice(c.dsrc, c.src.data(), static_cast<int64_t>(c.src.size())).ok());
      StridedConvert k;
      k.src = c.dsrc;
      k.dst = c.ddst;
      k.src_dtype = from;
      k.dst_dtype = to;
      k.ndim = 3;
      k.shape = {planes, rows, cols};
      k.src_strides = {rows * pitch * fs, pitch * fs, fs};
      k.dst_strides = {rows * cols * ts, cols * ts, ts};
      EXPECT_TRUE(VectorWalks(k)) << DTypeName(from) << " -> " << DTypeName(to);
      launch.push_back(k);
      cases.push_back(std::move(c));
    }
  }
  ASSERT_TRUE(LaunchBatchedConvert(launch, nullptr).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  for (const Case& c : cases) {
    const int64_t fs = DTypeSize(c.from), ts = DTypeSize(c.to);
    std::vector<unsigned char> got(static_cast<size_t>(planes * rows * cols * ts));
    ASSERT_TRUE(CopyToHost(got.data(), c.ddst, static_cast<int64_t>(got.size())).ok());
    for (int64_t r = 0; r < planes * rows; ++r) {
      for (int64_t e = 0; e < cols; ++e) {
        unsigned char want[4];
        ConvertElement(c.from, c.to, c.src.data() + (r * pitch + e) * fs, want);
        ASSERT_EQ(std::memcmp(got.data() + (r * cols + e) * ts, want, static_cast<size_t>(ts)), 0)
            << DTypeName(c.from) << " -> " << DTypeName(c.to) << " row " << r << " element " << e;
      }
    }
    EXPECT_TRUE(DeviceFree(c.dsrc).ok());
    EXPECT_TRUE(DeviceFree(c.ddst).ok());
  }
}

// -exp(A_log) into dense aligned rows (vector loads) gives the same bits as the same values
// converted one byte at a time (the destination one byte past aligned): both use the device's
// expf, whichever way they load.
TEST(BatchedConvertTest, NegExpGivesTheSameBitsWhicheverWayTheRowsAreLoaded) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  std::mt19937 rng(28);
  const int64_t rows = 33, cols = 128;
  for (DType from : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    const int64_t fs = DTypeSize(from);
    std::vector<unsigned char> src = SourceBytes(from, rows * cols, rng);
    Result<void*> dsrc = DeviceAlloc(static_cast<int64_t>(src.size()));
    Result<void*> ddst = DeviceAlloc(2 * rows * cols * 4 + 16);
    ASSERT_TRUE(dsrc.ok() && ddst.ok());
    ASSERT_TRUE(CopyToDevice(*dsrc, src.data(), static_cast<int64_t>(src.size())).ok());
    StridedConvert k;
    k.src = *dsrc;
    k.src_dtype = from;
    k.dst_dtype = DType::kFP32;
    k.fn = ElementFn::kNegExp;
    k.ndim = 2;
    k.shape = {rows, cols};
    k.src_strides = {cols * fs, fs};
    k.dst_strides = {cols * 4, 4};
    StridedConvert bytes = k;
    k.dst = *ddst;
    bytes.dst = static_cast<char*>(*ddst) + rows * cols * 4 + 1;
    EXPECT_TRUE(VectorWalks(k));
    EXPECT_FALSE(VectorWalks(bytes));
    ASSERT_TRUE(LaunchBatchedConvert({k, bytes}, nullptr).ok());
    ASSERT_TRUE(SynchronizeStream(nullptr).ok());
    std::vector<unsigned char> got(static_cast<size_t>(2 * rows * cols * 4 + 1));
    ASSERT_TRUE(CopyToHost(got.data(), *ddst, static_cast<int64_t>(got.size())).ok());
    ASSERT_EQ(std::memcmp(got.data(), got.data() + rows * cols * 4 + 1, static_cast<size_t>(rows * cols * 4)), 0)
        << DTypeName(from);
    EXPECT_TRUE(DeviceFree(*dsrc).ok());
    EXPECT_TRUE(DeviceFree(*ddst).ok());
  }
}

// Distance in fp32 ulps between two non-NaN values (adjacent floats are 1 apart; +0 and -0 are 0
// apart; the infinities are one past the largest finite values).
int64_t UlpDistance(uint32_t a, uint32_t b) {
  auto key = [](uint32_t bits) {
    const int64_t magnitude = bits & 0x7fffffffu;
    return (bits >> 31) != 0 ? -magnitude : magnitude;
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// -exp(x) rounded to fp32 from its double-precision value (within half an fp32 ulp of exact), as
// fp32 bits; beyond the largest fp32 it is -inf.
uint32_t NearNegExp(float x) {
  const double e = -std::exp(static_cast<double>(x));
  const float f = e < -static_cast<double>(std::numeric_limits<float>::max()) ? -INFINITY : static_cast<float>(e);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// vLLM's Mamba A = -exp(A_log) (core/base/element_fn.h) from bf16, fp16 and fp32 into fp32, strided
// on both sides. The device computes expf, not correctly rounded: its documented maximum error is
// 2 ulp over the full range (CUDA C++ Programming Guide, "Mathematical Functions", single
// precision), so each finite result must lie within 2 ulp of -exp computed in double and rounded
// to fp32; infinities and signed zeros equal the CPU reference's (std::exp), and a NaN stays a
// NaN. How many results differ from the CPU reference is printed.
TEST(BatchedConvertTest, NegExpIsWithinExpfsTwoUlpOfTheCpuReference) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  std::mt19937 rng(26);
  const int64_t elements = 100003;
  for (DType from : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    const int64_t fs = DTypeSize(from);
    std::vector<unsigned char> src = SourceBytes(from, elements * 2, rng);  // every other element
    const float extra[] = {0.f, 1.f, -2.f, 88.f, 89.f, -87.f, -104.f, -200.f};
    for (size_t i = 0; i < std::size(extra); ++i) {
      StoreFromFloat(from, src.data() + (40 + 2 * i) * fs, extra[i]);
    }
    Result<void*> dsrc = DeviceAlloc(static_cast<int64_t>(src.size()));
    Result<void*> ddst = DeviceAlloc(elements * 3 * 4);
    ASSERT_TRUE(dsrc.ok() && ddst.ok());
    ASSERT_TRUE(CopyToDevice(*dsrc, src.data(), static_cast<int64_t>(src.size())).ok());
    StridedConvert k;
    k.src = *dsrc;
    k.dst = *ddst;
    k.src_dtype = from;
    k.dst_dtype = DType::kFP32;
    k.fn = ElementFn::kNegExp;
    k.ndim = 1;
    k.shape = {elements};
    k.src_strides = {2 * fs};
    k.dst_strides = {3 * 4};
    ASSERT_TRUE(LaunchBatchedConvert({k}, nullptr).ok());
    ASSERT_TRUE(SynchronizeStream(nullptr).ok());
    std::vector<unsigned char> got(static_cast<size_t>(elements * 3 * 4));
    ASSERT_TRUE(CopyToHost(got.data(), *ddst, static_cast<int64_t>(got.size())).ok());
    int64_t inexact = 0;
    for (int64_t e = 0; e < elements; ++e) {
      unsigned char want_bytes[4];
      TransformElement(ElementFn::kNegExp, from, DType::kFP32, src.data() + 2 * e * fs, want_bytes);
      uint32_t want, have;
      std::memcpy(&want, want_bytes, 4);
      std::memcpy(&have, got.data() + 3 * 4 * e, 4);
      const bool want_nan = (want & 0x7fffffffu) > 0x7f800000u, have_nan = (have & 0x7fffffffu) > 0x7f800000u;
      ASSERT_EQ(have_nan, want_nan) << DTypeName(from) << " element " << e;
      if (want_nan) continue;
      const bool special = (want & 0x7fffffffu) == 0x7f800000u || (want & 0x7fffffffu) == 0;
      if (special) {
        ASSERT_EQ(have, want) << DTypeName(from) << " element " << e << ": infinities and zeros are exact";
        continue;
      }
      const float x = LoadAsFloat(from, src.data() + 2 * e * fs);
      ASSERT_LE(UlpDistance(have, NearNegExp(x)), 2) << DTypeName(from) << " element " << e << " x " << x;
      inexact += have != want;
    }
    std::printf("%s -> fp32 neg_exp: %lld of %lld elements differ from the host's by 1-2 ulp\n",
                std::string(DTypeName(from)).c_str(), static_cast<long long>(inexact),
                static_cast<long long>(elements));
    EXPECT_TRUE(DeviceFree(*dsrc).ok());
    EXPECT_TRUE(DeviceFree(*ddst).ok());
  }
}

// 300 tables launched together (three launches of at most 128), each holding two conversions of
// its own kind: bf16 rows into fp8 e4m3 (the vector walk), fp32 into bf16 from every other
// element (the byte walk) and fp16 rows into fp32 one byte past aligned (the byte walk), with an
// empty table among them; every element bit for bit the CPU reference.
TEST(BatchedConvertTest, TablesLaunchedTogetherMatchTheCpuReference) {
  if (DeviceCount() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device on this machine";
  constexpr int kTables = 300;
  constexpr int64_t kIn = 8192, kOut = 8192, kRows = 4, kCols = 256;  // bytes a table's regions span
  std::mt19937 rng(31);
  std::vector<unsigned char> host(kTables * kIn);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  Result<void*> src = DeviceAlloc(kTables * kIn);
  Result<void*> dst = DeviceAlloc(kTables * kOut);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(CopyToDevice(*src, host.data(), kTables * kIn).ok());
  const std::vector<unsigned char> zeros(kTables * kOut, 0);
  ASSERT_TRUE(CopyToDevice(*dst, zeros.data(), kTables * kOut).ok());
  std::vector<unsigned char> want(zeros);
  std::vector<std::unique_ptr<ConvertTable>> owned;
  for (int t = 0; t < kTables; ++t) {
    std::vector<StridedConvert> converts;
    for (int half = 0; half < 2; ++half) {
      StridedConvert k;
      const int64_t in = t * kIn + half * kIn / 2, out = t * kOut + half * kOut / 2;
      k.src_dtype = t % 3 == 0 ? DType::kBF16 : t % 3 == 1 ? DType::kFP32 : DType::kFP16;
      k.dst_dtype = t % 3 == 0 ? DType::kFP8E4M3 : t % 3 == 1 ? DType::kBF16 : DType::kFP32;
      const int64_t fs = DTypeSize(k.src_dtype), ts = DTypeSize(k.dst_dtype);
      const int64_t skip = t % 3 == 1 ? 2 : 1, shift = t % 3 == 2 ? 1 : 0;
      const int64_t cols = t % 3 == 2 ? kCols / 2 : kCols;  // fp32 rows of 128 fit a half
      k.src = static_cast<const unsigned char*>(*src) + in;
      k.dst = static_cast<unsigned char*>(*dst) + out + shift;
      k.ndim = 2;
      k.shape = {kRows, cols / skip};
      k.src_strides = {cols * fs, skip * fs};
      k.dst_strides = {cols / skip * ts, ts};
      EXPECT_EQ(VectorWalks(k), t % 3 == 0) << "table " << t;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < cols / skip; ++c) {
          ConvertElement(k.src_dtype, k.dst_dtype, host.data() + in + r * cols * fs + c * skip * fs,
                         want.data() + out + shift + (r * (cols / skip) + c) * ts);
        }
      }
      converts.push_back(k);
    }
    Result<std::unique_ptr<ConvertTable>> table = ConvertTable::Upload(converts, nullptr);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    owned.push_back(std::move(*table));
  }
  Result<std::unique_ptr<ConvertTable>> empty = ConvertTable::Upload({}, nullptr);
  ASSERT_TRUE(empty.ok());
  std::vector<const ConvertTable*> tables;
  for (const auto& t : owned) tables.push_back(t.get());
  tables.insert(tables.begin() + 7, empty->get());
  ASSERT_TRUE(ConvertTable::LaunchTogether(tables).ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  std::vector<unsigned char> got(kTables * kOut);
  ASSERT_TRUE(CopyToHost(got.data(), *dst, kTables * kOut).ok());
  for (int64_t i = 0; i < kTables * kOut; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "table " << i / kOut << " byte " << i % kOut;
  }
  owned.clear();
  empty->reset();
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  EXPECT_TRUE(DeviceFree(*src).ok());
  EXPECT_TRUE(DeviceFree(*dst).ok());
}

TEST(BatchedConvertTest, NegExpIntoAnythingButFp32IsAnErrorNamingIt) {
  StridedConvert k;
  k.src_dtype = DType::kBF16;
  k.dst_dtype = DType::kBF16;
  k.fn = ElementFn::kNegExp;
  k.shape = {4};
  Status s = LaunchBatchedConvert({k}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("neg_exp does not apply from bf16 to bf16"), std::string::npos) << s.ToString();
}

TEST(BatchedConvertTest, UnsupportedDtypeIsAnErrorNamingIt) {
  StridedConvert k;
  k.src_dtype = DType::kInt32;
  k.dst_dtype = DType::kFP32;
  k.shape = {4};
  Status s = LaunchBatchedConvert({k}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("int32"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ferry::cuda
