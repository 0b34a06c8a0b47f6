// The batched convert kernel on a GPU: every float dtype pair, strided and dense sides at odd byte
// offsets, random bit patterns (NaN, ±inf, subnormals, overflow included) plus a list of special
// values, several conversions in one launch; the result must equal the CPU reference
// (ConvertElement) bit for bit. Without a GPU each test reports itself SKIPPED.
#include "core/cuda/batched_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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
