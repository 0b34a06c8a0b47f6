// ConvertFloatRow: one loop a pair of dtypes, table-driven where the source has 16 bits or fewer
// and so does the result.
#include "core/runtime/convert_row.h"

#include <bit>
#include <cstring>
#include <vector>

#include "core/base/float_convert.h"

namespace ferry {
namespace {

static_assert(std::endian::native == std::endian::little,
              "element bits are read and written as little-endian words");

template <int kBytes>
uint32_t LoadBits(const unsigned char* p) {
  uint32_t bits = 0;
  std::memcpy(&bits, p, kBytes);
  return bits;
}

template <int kBytes>
void StoreBits(unsigned char* p, uint32_t bits) {
  std::memcpy(p, &bits, kBytes);
}

// Every kFrom value's kTo bits, by the source's bits (FloatBytes(kFrom) <= 2).
template <DType kFrom, DType kTo>
const std::vector<uint16_t>& ConversionTable() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(size_t{1} << (8 * FloatBytes(kFrom)));
    for (size_t bits = 0; bits < t.size(); ++bits) {
      t[bits] = static_cast<uint16_t>(FloatAsBits(kTo, BitsAsFloat(kFrom, static_cast<uint32_t>(bits))));
    }
    return t;
  }();
  return table;
}

template <DType kFrom, DType kTo>
void ConvertRowAs(int64_t count, const unsigned char* src, int64_t src_step, unsigned char* dst,
                  int64_t dst_step) {
  constexpr int kFromBytes = FloatBytes(kFrom), kToBytes = FloatBytes(kTo);
  if constexpr (kFromBytes <= 2 && kToBytes <= 2) {
    const uint16_t* table = ConversionTable<kFrom, kTo>().data();
    for (int64_t j = 0; j < count; ++j) {
      StoreBits<kToBytes>(dst + j * dst_step, table[LoadBits<kFromBytes>(src + j * src_step)]);
    }
  } else {
    for (int64_t j = 0; j < count; ++j) {
      const float v = BitsAsFloat(kFrom, LoadBits<kFromBytes>(src + j * src_step));
      StoreBits<kToBytes>(dst + j * dst_step, FloatAsBits(kTo, v));
    }
  }
}

using RowConverter = void (*)(int64_t, const unsigned char*, int64_t, unsigned char*, int64_t);

template <DType kFrom>
RowConverter ConverterTo(DType to) {
  switch (to) {
    case DType::kBF16: return &ConvertRowAs<kFrom, DType::kBF16>;
    case DType::kFP16: return &ConvertRowAs<kFrom, DType::kFP16>;
    case DType::kFP8E4M3: return &ConvertRowAs<kFrom, DType::kFP8E4M3>;
    case DType::kFP8E5M2: return &ConvertRowAs<kFrom, DType::kFP8E5M2>;
    default: return &ConvertRowAs<kFrom, DType::kFP32>;
  }
}

RowConverter ConverterOf(DType from, DType to) {
  switch (from) {
    case DType::kBF16: return ConverterTo<DType::kBF16>(to);
    case DType::kFP16: return ConverterTo<DType::kFP16>(to);
    case DType::kFP8E4M3: return ConverterTo<DType::kFP8E4M3>(to);
    case DType::kFP8E5M2: return ConverterTo<DType::kFP8E5M2>(to);
    default: return ConverterTo<DType::kFP32>(to);
  }
}

}  // namespace

void ConvertFloatRow(DType from, DType to, int64_t count, const unsigned char* src,
                     int64_t src_step, unsigned char* dst, int64_t dst_step) {
  ConverterOf(from, to)(count, src, src_step, dst, dst_step);
}

}  // namespace ferry
