// The batched convert kernel of core/cuda/batched_convert.h: a grid over (conversion, element),
// each block converting up to kElementsPerBlock consecutive elements (row-major over the shape)
// of one conversion, found by binary search over the blocks' prefix sums. Each thread converts a
// group of kGroup consecutive elements, finding the offsets of its first by division over the
// shape and stepping along the innermost dimension from there. Two ways to walk a group, chosen
// per conversion on the host (VectorWalks):
//  * vector (the innermost dimension dense on both sides, its length a multiple of kGroup, and
//    every row start aligned to the group's loads and stores, as a weight's rows are): the group
//    is loaded with one or two vector loads, converted in registers by code compiled for its pair
//    of dtypes and stored likewise;
//  * bytes (anything else: staging packs regions of different dtypes back to back, so a region
//    may start at any byte): each element loaded and stored byte by byte.
// Both convert with TransformElement's arithmetic (core/base/element_fn.h, float_convert.h), so
// the bits are the host path's.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/base/element_fn.h"
#include "core/base/float_convert.h"
#include "core/cuda/batched_convert.h"
#include "core/cuda/device_table.cuh"

namespace ferry::cuda {
namespace {

struct ConvertDescriptor {
  const unsigned char* src;
  unsigned char* dst;
  DType src_dtype;
  DType dst_dtype;
  ElementFn fn;
  bool vector;  // VectorWalks
  int ndim;
  int64_t elements;
  int64_t shape[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t first_block;  // prefix sum of blocks over conversions
};

constexpr int kThreads = 256;
constexpr int kGroup = 8;  // consecutive elements a thread converts
constexpr int64_t kElementsPerBlock = kThreads * kGroup;

// Byte offsets of element `e` (row-major over the shape) on each side. 32-bit division where the
// conversion's element count allows it: a 64-bit division costs the GPU several times more.
__device__ void OffsetsOf(const ConvertDescriptor& d, int64_t e, int64_t& src_off, int64_t& dst_off) {
  src_off = 0;
  dst_off = 0;
  if (d.elements <= 0xffffffff) {
    uint32_t rest = static_cast<uint32_t>(e);
    for (int dim = d.ndim - 1; dim >= 0; --dim) {
      const uint32_t extent = static_cast<uint32_t>(d.shape[dim]);
      const uint32_t idx = rest % extent;
      rest /= extent;
      src_off += idx * d.src_strides[dim];
      dst_off += idx * d.dst_strides[dim];
    }
    return;
  }
  for (int dim = d.ndim - 1; dim >= 0; --dim) {
    const int64_t idx = e % d.shape[dim];
    e /= d.shape[dim];
    src_off += idx * d.src_strides[dim];
    dst_off += idx * d.dst_strides[dim];
  }
}

// The bits of kGroup elements of kBytes bytes each at `p` (aligned to min(kGroup * kBytes, 16)).
template <int kBytes>
__device__ void LoadGroup(const unsigned char* p, uint32_t (&bits)[kGroup]) {
  if constexpr (kBytes == 1) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    for (int j = 0; j < kGroup; ++j) bits[j] = (j < 4 ? v.x : v.y) >> (8 * (j % 4)) & 0xffu;
  } else if constexpr (kBytes == 2) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int j = 0; j < kGroup; ++j) bits[j] = w[j / 2] >> (16 * (j % 2)) & 0xffffu;
  } else {
    const uint4 a = reinterpret_cast<const uint4*>(p)[0], b = reinterpret_cast<const uint4*>(p)[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    for (int j = 0; j < kGroup; ++j) bits[j] = w[j];
  }
}

// Stores kGroup elements of kBytes bytes each at `p` (aligned as LoadGroup's).
template <int kBytes>
__device__ void StoreGroup(unsigned char* p, const uint32_t (&bits)[kGroup]) {
  if constexpr (kBytes == 1) {
    uint32_t w[2] = {0, 0};
    for (int j = 0; j < kGroup; ++j) w[j / 4] |= bits[j] << (8 * (j % 4));
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else if constexpr (kBytes == 2) {
    uint32_t w[4] = {0, 0, 0, 0};
    for (int j = 0; j < kGroup; ++j) w[j / 2] |= bits[j] << (16 * (j % 2));
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    reinterpret_cast<uint4*>(p)[0] = make_uint4(bits[0], bits[1], bits[2], bits[3]);
    reinterpret_cast<uint4*>(p)[1] = make_uint4(bits[4], bits[5], bits[6], bits[7]);
  }
}

// The vector walk of the group from kFrom to kTo starting at element `first` (a multiple of
// kGroup, so the group lies in one row). The dtypes are template arguments so that the conversion
// compiles to its own instructions, without a branch on the dtypes an element.
template <DType kFrom, DType kTo>
__device__ void ConvertGroupVector(const ConvertDescriptor& d, int64_t first) {
  int64_t src_off, dst_off;
  OffsetsOf(d, first, src_off, dst_off);
  uint32_t bits[kGroup];
  LoadGroup<FloatBytes(kFrom)>(d.src + src_off, bits);
#pragma unroll
  for (int j = 0; j < kGroup; ++j) bits[j] = TransformBits(d.fn, kFrom, kTo, bits[j]);
  StoreGroup<FloatBytes(kTo)>(d.dst + dst_off, bits);
}

// ConvertGroupVector for the conversion's destination dtype.
template <DType kFrom>
__device__ void ConvertGroupVectorTo(const ConvertDescriptor& d, int64_t first) {
  switch (d.dst_dtype) {
    case DType::kBF16: return ConvertGroupVector<kFrom, DType::kBF16>(d, first);
    case DType::kFP16: return ConvertGroupVector<kFrom, DType::kFP16>(d, first);
    case DType::kFP8E4M3: return ConvertGroupVector<kFrom, DType::kFP8E4M3>(d, first);
    case DType::kFP8E5M2: return ConvertGroupVector<kFrom, DType::kFP8E5M2>(d, first);
    default: return ConvertGroupVector<kFrom, DType::kFP32>(d, first);
  }
}

// ConvertGroupVector for the conversion's dtypes (both IsConvertibleFloat: CheckConvert).
__device__ void ConvertGroupVectorOf(const ConvertDescriptor& d, int64_t first) {
  switch (d.src_dtype) {
    case DType::kBF16: return ConvertGroupVectorTo<DType::kBF16>(d, first);
    case DType::kFP16: return ConvertGroupVectorTo<DType::kFP16>(d, first);
    case DType::kFP8E4M3: return ConvertGroupVectorTo<DType::kFP8E4M3>(d, first);
    case DType::kFP8E5M2: return ConvertGroupVectorTo<DType::kFP8E5M2>(d, first);
    default: return ConvertGroupVectorTo<DType::kFP32>(d, first);
  }
}

// The byte walk of elements [first, end): offsets stepped along the innermost dimension, found
// again by division where a row ends.
__device__ void ConvertGroupBytes(const ConvertDescriptor& d, int64_t first, int64_t end) {
  const int inner = d.ndim - 1;
  int64_t src_off, dst_off;
  OffsetsOf(d, first, src_off, dst_off);
  int64_t column = first % d.shape[inner];
  for (int64_t e = first; e < end; ++e) {
    TransformElement(d.fn, d.src_dtype, d.dst_dtype, d.src + src_off, d.dst + dst_off);
    if (++column < d.shape[inner]) {
      src_off += d.src_strides[inner];
      dst_off += d.dst_strides[inner];
    } else if (e + 1 < end) {
      OffsetsOf(d, e + 1, src_off, dst_off);
      column = 0;
    }
  }
}

__global__ void BatchedConvertKernel(const ConvertDescriptor* __restrict__ descriptors, int count) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const ConvertDescriptor& d = descriptors[lo];
  const int64_t first = (block - d.first_block) * kElementsPerBlock + threadIdx.x * kGroup;
  if (first >= d.elements) return;
  if (d.vector) {
    ConvertGroupVectorOf(d, first);
  } else {
    ConvertGroupBytes(d, first, min(d.elements, first + kGroup));
  }
}

// Whether every group of `c` takes the vector walk: the innermost dimension dense on both sides
// with a length that is a multiple of kGroup, and the base pointers and every outer stride
// multiples of each side's load or store width.
bool VectorWalks(const StridedConvert& c) {
  const int inner = c.ndim - 1;
  const int64_t src_bytes = DTypeSize(c.src_dtype), dst_bytes = DTypeSize(c.dst_dtype);
  if (c.shape[inner] % kGroup != 0 || c.src_strides[inner] != src_bytes ||
      c.dst_strides[inner] != dst_bytes) {
    return false;
  }
  const int64_t src_align = std::min<int64_t>(kGroup * src_bytes, 16);
  const int64_t dst_align = std::min<int64_t>(kGroup * dst_bytes, 16);
  if (reinterpret_cast<uintptr_t>(c.src) % src_align != 0 ||
      reinterpret_cast<uintptr_t>(c.dst) % dst_align != 0) {
    return false;
  }
  for (int dim = 0; dim < inner; ++dim) {
    if (c.src_strides[dim] % src_align != 0 || c.dst_strides[dim] % dst_align != 0) return false;
  }
  return true;
}

Status CheckConvert(const StridedConvert& c, size_t i) {
  if (c.ndim < 1 || c.ndim > kMaxCopyDims) {
    return InvalidArgument("batched convert " + std::to_string(i) + ": ndim " +
                           std::to_string(c.ndim) + " outside [1, " +
                           std::to_string(kMaxCopyDims) + "]");
  }
  if (!IsConvertibleFloat(c.src_dtype) || !IsConvertibleFloat(c.dst_dtype)) {
    return InvalidArgument("batched convert " + std::to_string(i) + ": no CUDA conversion " +
                           std::string(DTypeName(c.src_dtype)) + " -> " +
                           std::string(DTypeName(c.dst_dtype)));
  }
  if (!ElementFnApplies(c.fn, c.src_dtype, c.dst_dtype)) {
    return InvalidArgument("batched convert " + std::to_string(i) + ": " +
                           std::string(ElementFnName(c.fn)) + " does not apply from " +
                           std::string(DTypeName(c.src_dtype)) + " to " +
                           std::string(DTypeName(c.dst_dtype)));
  }
  return Status::Ok();
}

ConvertDescriptor Describe(const StridedConvert& c) {
  ConvertDescriptor d{};
  d.src = static_cast<const unsigned char*>(c.src);
  d.dst = static_cast<unsigned char*>(c.dst);
  d.src_dtype = c.src_dtype;
  d.dst_dtype = c.dst_dtype;
  d.fn = c.fn;
  d.vector = VectorWalks(c);
  d.ndim = c.ndim;
  d.elements = 1;
  for (int dim = 0; dim < c.ndim; ++dim) {
    d.shape[dim] = c.shape[dim];
    d.src_strides[dim] = c.src_strides[dim];
    d.dst_strides[dim] = c.dst_strides[dim];
    d.elements *= c.shape[dim];
  }
  return d;
}

}  // namespace

Result<std::unique_ptr<ConvertTable>> ConvertTable::Upload(
    const std::vector<StridedConvert>& converts, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<ConvertDescriptor> descriptors;
  descriptors.reserve(converts.size());
  int64_t blocks = 0;
  for (size_t i = 0; i < converts.size(); ++i) {
    FERRY_RETURN_IF_ERROR(CheckConvert(converts[i], i));
    ConvertDescriptor d = Describe(converts[i]);
    if (d.elements == 0) continue;
    d.first_block = blocks;
    blocks += (d.elements + kElementsPerBlock - 1) / kElementsPerBlock;
    descriptors.push_back(d);
  }
  if (blocks > 0x7fffffff) return InvalidArgument("batched convert too large for one launch");
  void* table = nullptr;
  if (!descriptors.empty()) {
    FERRY_ASSIGN_OR_RETURN(
        table, UploadTable({std::as_bytes(std::span(descriptors))}, stream, "convert descriptors"));
  }
  return std::unique_ptr<ConvertTable>(
      new ConvertTable(stream_ptr, table, static_cast<int64_t>(descriptors.size()), blocks));
}

ConvertTable::~ConvertTable() {
  if (table_ != nullptr) cudaFreeAsync(table_, static_cast<cudaStream_t>(stream_));
}

Status ConvertTable::Launch() const {
  if (count_ == 0) return Status::Ok();
  BatchedConvertKernel<<<static_cast<unsigned>(blocks_), kThreads, 0,
                         static_cast<cudaStream_t>(stream_)>>>(
      static_cast<const ConvertDescriptor*>(table_), static_cast<int>(count_));
  return CudaStatus(cudaGetLastError(), "BatchedConvertKernel launch");
}

Status LaunchBatchedConvert(const std::vector<StridedConvert>& converts, void* stream) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ConvertTable> table,
                         ConvertTable::Upload(converts, stream));
  return table->Launch();  // the table's memory is freed after the kernel, in stream order
}

}  // namespace ferry::cuda
