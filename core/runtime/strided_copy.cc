// Strided copy geometry, slicing and kernels (memcpy runs, element loops, dtype conversion: between
// float dtypes by core/base/float_convert.h, the CPU reference every path shares).
#include "core/runtime/strided_copy.h"

#include "core/base/float_convert.h"
#include "core/runtime/convert_row.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry {

namespace {

template <typename T>
T LoadAs(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void StoreAs(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// One element as a double: the float dtypes through core/base/float_convert.h (exact), the
// others directly. Conversions between two float dtypes skip this (ConvertElement).
double Load(DType d, const char* p) {
  if (IsConvertibleFloat(d)) return LoadAsFloat(d, reinterpret_cast<const unsigned char*>(p));
  switch (d) {
    case DType::kFP64: return LoadAs<double>(p);
    case DType::kInt8: return LoadAs<int8_t>(p);
    case DType::kInt16: return LoadAs<int16_t>(p);
    case DType::kInt32: return LoadAs<int32_t>(p);
    case DType::kInt64: return static_cast<double>(LoadAs<int64_t>(p));
    case DType::kUInt8: return LoadAs<uint8_t>(p);
    default: return 0;
  }
}

void Store(DType d, char* p, double v) {
  if (IsConvertibleFloat(d)) {
    StoreFromFloat(d, reinterpret_cast<unsigned char*>(p), static_cast<float>(v));
    return;
  }
  switch (d) {
    case DType::kFP64: StoreAs(p, v); break;
    case DType::kInt8: StoreAs(p, static_cast<int8_t>(std::lround(v))); break;
    case DType::kInt16: StoreAs(p, static_cast<int16_t>(std::lround(v))); break;
    case DType::kInt32: StoreAs(p, static_cast<int32_t>(std::llround(v))); break;
    case DType::kInt64: StoreAs(p, static_cast<int64_t>(std::llround(v))); break;
    case DType::kUInt8: StoreAs(p, static_cast<uint8_t>(std::lround(v))); break;
    default: break;
  }
}

}  // namespace

Result<CopyGeometry> MakeCopyGeometry(const Region& from, const Region& to, ElementFn fn) {
  if (!ElementFnApplies(fn, from.dtype, to.dtype)) {
    return InvalidArgument("copy applying " + std::string(ElementFnName(fn)) + " from " +
                           std::string(DTypeName(from.dtype)) + " to " + std::string(DTypeName(to.dtype)));
  }
  if (from.NumElements() != to.NumElements()) {
    return InvalidArgument("copy from " + std::to_string(from.NumElements()) + " elements to " +
                           std::to_string(to.NumElements()));
  }
  if (from.ndim != to.ndim) return InvalidArgument("copy between regions of different rank");
  for (int d = 0; d < from.ndim; ++d) {
    if (from.shape[d] != to.shape[d]) return InvalidArgument("copy between regions of different shape");
  }
  CopyGeometry g;
  g.from_dtype = from.dtype;
  g.to_dtype = to.dtype;
  g.fn = fn;
  int64_t fsize = DTypeSize(from.dtype), tsize = DTypeSize(to.dtype);
  // Dims with extent > 1, outermost first, strides in bytes (fixed arrays: this runs once per
  // copy pair of every refit, so no allocation).
  std::array<std::array<int64_t, 3>, kMaxDims> dims;
  int count = 0;
  for (int d = 0; d < from.ndim; ++d) {
    if (from.shape[d] == 1) continue;
    dims[count++] = {from.shape[d], from.strides[d] * fsize, to.strides[d] * tsize};
  }
  if (from.NumElements() == 0) {
    g.rows = 0;
    g.run = 0;
    return g;
  }
  // Merge an outer dim into the next inner one when both sides are dense across them (inner to
  // outer, so a merged dim can merge again).
  std::array<std::array<int64_t, 3>, kMaxDims> merged;
  int kept = 0;
  for (int i = count - 1; i >= 0; --i) {
    const auto& outer = dims[i];
    if (kept > 0) {
      auto& inner = merged[kept - 1];
      if (outer[1] == inner[0] * inner[1] && outer[2] == inner[0] * inner[2]) {
        inner = {outer[0] * inner[0], inner[1], inner[2]};
        continue;
      }
    }
    merged[kept++] = outer;
  }
  if (kept == 0) merged[kept++] = {1, fsize, tsize};
  std::reverse(merged.begin(), merged.begin() + kept);  // outermost first again
  g.run = merged[kept - 1][0];
  g.from_inner = merged[kept - 1][1];
  g.to_inner = merged[kept - 1][2];
  g.outer_dims = kept - 1;
  g.rows = 1;
  for (int d = 0; d < g.outer_dims; ++d) {
    g.extent[d] = merged[d][0];
    g.from_stride[d] = merged[d][1];
    g.to_stride[d] = merged[d][2];
    g.rows *= merged[d][0];
  }
  return g;
}

std::vector<CopySlice> SliceCopy(const CopyGeometry& g, int64_t target_bytes, int max_slices) {
  std::vector<CopySlice> slices;
  int64_t total = g.bytes();
  if (total == 0) return slices;
  int64_t want = std::clamp<int64_t>((total + target_bytes - 1) / std::max<int64_t>(target_bytes, 1),
                                     1, std::max(1, max_slices));
  if (g.rows == 1 && g.contiguous_run() && want > 1) {
    int64_t run_bytes = g.run * DTypeSize(g.to_dtype);
    int64_t step = (run_bytes + want - 1) / want;
    step = (step + 63) & ~int64_t{63};  // cache-line multiples
    for (int64_t b = 0; b < run_bytes; b += step) slices.push_back({0, 0, b, std::min(run_bytes, b + step)});
    return slices;
  }
  want = std::min(want, g.rows);
  for (int64_t i = 0; i < want; ++i) {
    slices.push_back({g.rows * i / want, g.rows * (i + 1) / want, 0, 0});
  }
  return slices;
}

namespace {

// Copies n bytes, kWidth <= n <= 2 * kWidth, as two overlapping fixed-size moves (the first and
// the last kWidth bytes), both loaded before either is stored.
template <size_t kWidth>
inline void CopyOverlapping(char* dst, const char* src, size_t n) {
  char head[kWidth], tail[kWidth];
  std::memcpy(head, src, kWidth);
  std::memcpy(tail, src + n - kWidth, kWidth);
  std::memcpy(dst, head, kWidth);
  std::memcpy(dst + n - kWidth, tail, kWidth);
}

// Copies n bytes, n small: fixed-size moves the compiler inlines, instead of a call into libc per
// row (a third of the demo's bytes come in rows of 24-32 bytes).
inline void CopyRow(char* dst, const char* src, size_t n) {
  if (n >= 8 && n <= 16) {
    CopyOverlapping<8>(dst, src, n);
  } else if (n > 16 && n <= 32) {
    CopyOverlapping<16>(dst, src, n);
  } else if (n > 32 && n <= 64) {
    CopyOverlapping<32>(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

// Rows at least this long are written with non-temporal stores: the destination of a refit is not
// read again soon, and streaming skips the read-for-ownership of every destination line (a third
// of the memory traffic of a cached copy). libc's memcpy streams only far larger copies.
constexpr size_t kStreamBytes = 1024;

// Copies n >= 64 bytes with 16-byte non-temporal stores; the caller fences (StreamFence) before
// the data is published to another thread.
inline void CopyRowStream(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, src += 64, dst += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, n);
#else
  std::memcpy(dst, src, n);
#endif
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// A row of a conversion between two float dtypes (convert_row.h), or element by element applying
// the element function when there is one (core/base/element_fn.h).
void ConvertRow(const CopyGeometry& g, const unsigned char* src, unsigned char* dst) {
  if (g.fn != ElementFn::kNone) {
    for (int64_t j = 0; j < g.run; ++j) {
      TransformElement(g.fn, g.from_dtype, g.to_dtype, src + j * g.from_inner, dst + j * g.to_inner);
    }
    return;
  }
  ConvertFloatRow(g.from_dtype, g.to_dtype, g.run, src, g.from_inner, dst, g.to_inner);
}

// A row of n bytes, streamed when long.
inline void CopyAnyRow(char* dst, const char* src, size_t n) {
  if (n >= kStreamBytes) {
    CopyRowStream(dst, src, n);
  } else {
    CopyRow(dst, src, n);
  }
}

}  // namespace

Status RunCopySlice(const CopyGeometry& g, const CopySlice& slice, const char* from, char* to) {
  if (slice.row_begin == slice.row_end) {
    if (slice.byte_end > slice.byte_begin) {
      CopyAnyRow(to + slice.byte_begin, from + slice.byte_begin,
                 static_cast<size_t>(slice.byte_end - slice.byte_begin));
      StreamFence();
    }
    return Status::Ok();
  }
  const int64_t fsize = DTypeSize(g.from_dtype);
  const bool same = g.from_dtype == g.to_dtype && g.fn == ElementFn::kNone;
  const bool memcpy_rows = g.contiguous_run();
  if (memcpy_rows && g.outer_dims == 1) {  // the common matrix case: no odometer
    const size_t n = static_cast<size_t>(g.run * fsize);
    const char* src = from + slice.row_begin * g.from_stride[0];
    char* dst = to + slice.row_begin * g.to_stride[0];
    if (n >= kStreamBytes) {
      for (int64_t row = slice.row_begin; row < slice.row_end; ++row) {
        CopyRowStream(dst, src, n);
        src += g.from_stride[0];
        dst += g.to_stride[0];
      }
      StreamFence();
      return Status::Ok();
    }
    for (int64_t row = slice.row_begin; row < slice.row_end; ++row) {
      CopyRow(dst, src, n);
      src += g.from_stride[0];
      dst += g.to_stride[0];
    }
    return Status::Ok();
  }
  RowWalker rows(g, slice.row_begin);
  for (int64_t row = slice.row_begin; row < slice.row_end; ++row, rows.Next()) {
    const char* src = from + rows.from_offset();
    char* dst = to + rows.to_offset();
    if (memcpy_rows) {
      CopyAnyRow(dst, src, static_cast<size_t>(g.run * fsize));
    } else if (same) {
      switch (fsize) {
        case 1: for (int64_t j = 0; j < g.run; ++j) dst[j * g.to_inner] = src[j * g.from_inner]; break;
        case 2: for (int64_t j = 0; j < g.run; ++j) std::memcpy(dst + j * g.to_inner, src + j * g.from_inner, 2); break;
        case 4: for (int64_t j = 0; j < g.run; ++j) std::memcpy(dst + j * g.to_inner, src + j * g.from_inner, 4); break;
        default:
          for (int64_t j = 0; j < g.run; ++j) {
            std::memcpy(dst + j * g.to_inner, src + j * g.from_inner, static_cast<size_t>(fsize));
          }
      }
    } else if (IsConvertibleFloat(g.from_dtype) && IsConvertibleFloat(g.to_dtype)) {
      ConvertRow(g, reinterpret_cast<const unsigned char*>(src), reinterpret_cast<unsigned char*>(dst));
    } else {
      for (int64_t j = 0; j < g.run; ++j) {
        Store(g.to_dtype, dst + j * g.to_inner, Load(g.from_dtype, src + j * g.from_inner));
      }
    }
  }
  if (memcpy_rows) StreamFence();
  return Status::Ok();
}

}  // namespace ferry
