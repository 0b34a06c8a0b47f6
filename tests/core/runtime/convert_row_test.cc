// ConvertFloatRow against the CPU reference (ConvertElement), bit for bit: every value of every
// 8- and 16-bit source into every other float dtype (the table-driven pairs and the computed ones
// into fp32), fp32 sources from random bits and special values, with strided and dense steps.
#include "core/runtime/convert_row.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/float_convert.h"

namespace ferry {
namespace {

constexpr DType kFloats[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3,
                             DType::kFP8E5M2};

// Converts `src` (`count` elements of `from`, `src_step` bytes apart) with ConvertFloatRow into
// elements `dst_step` bytes apart, and checks each against ConvertElement.
void ExpectMatchesReference(DType from, DType to, const std::vector<unsigned char>& src, int64_t count,
                            int64_t src_step, int64_t dst_step) {
  const int64_t ts = DTypeSize(to);
  std::vector<unsigned char> got(static_cast<size_t>(count * dst_step), 0);
  ConvertFloatRow(from, to, count, src.data(), src_step, got.data(), dst_step);
  for (int64_t j = 0; j < count; ++j) {
    unsigned char want[4];
    ConvertElement(from, to, src.data() + j * src_step, want);
    ASSERT_EQ(std::memcmp(got.data() + j * dst_step, want, static_cast<size_t>(ts)), 0)
        << DTypeName(from) << " -> " << DTypeName(to) << " element " << j;
  }
}

TEST(ConvertFloatRowTest, EverySmallSourceValueMatchesTheReference) {
  for (DType from : kFloats) {
    const int64_t fs = DTypeSize(from);
    if (fs > 2) continue;
    const int64_t count = int64_t{1} << (8 * fs);
    std::vector<unsigned char> src(static_cast<size_t>(count * fs));
    for (int64_t v = 0; v < count; ++v) std::memcpy(src.data() + v * fs, &v, static_cast<size_t>(fs));
    for (DType to : kFloats) {
      if (to == from) continue;
      ExpectMatchesReference(from, to, src, count, fs, DTypeSize(to));
    }
  }
}

TEST(ConvertFloatRowTest, Fp32SourcesMatchTheReferenceWithAnySteps) {
  std::mt19937 rng(31);
  const int64_t count = 100003;
  std::vector<unsigned char> src(static_cast<size_t>(count * 4 * 3));
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, -NAN, 448.f, 464.f, 480.f,
                            57344.f, 61440.f, 65520.f, 65536.f, std::ldexp(1.f, -25), 1e-40f};
  for (size_t i = 0; i < std::size(specials); ++i) std::memcpy(src.data() + 3 * 4 * i, &specials[i], 4);
  for (DType to : kFloats) {
    if (to == DType::kFP32) continue;
    ExpectMatchesReference(DType::kFP32, to, src, count, 3 * 4, 2 * DTypeSize(to));
  }
  // Odd steps: elements at any byte.
  ExpectMatchesReference(DType::kBF16, DType::kFP8E4M3, src, count, 5, 3);
}

}  // namespace
}  // namespace ferry
