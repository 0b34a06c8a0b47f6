// The batched convert kernel of core/cuda/batched_convert.h: a grid over (conversion, element),
// each block converting kUnroll groups a thread of consecutive elements (row-major over the
// shape) of one conversion, found by binary search over the blocks' prefix sums. A thread finds
// its group's first element's offsets by division over the shape. Two ways to walk a group,
// chosen per conversion on the host (VectorWalksOf):
//  * vector (the innermost dimension dense on both sides, its length a multiple of the group, and
//    every row start aligned to the group's loads and stores, as a weight's rows are): a group is
//    VectorGroup(from, to) elements, so that its store is 16-32 bytes; the thread loads a batch of
//    its groups (kBatchBytes) before converting any, converts in registers by code compiled for the
//    pair of dtypes and stores with vector stores. Narrower stores leave memory bandwidth unused
//    (into fp8 most of all: batched_convert_bench, docs/BENCHMARKS.md);
//  * bytes (anything else: staging packs regions of different dtypes back to back, so a region
//    may start at any byte): groups of kByteGroup elements, each loaded and stored byte by byte.
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
  bool vector;  // VectorWalksOf
  int ndim;
  int group;  // elements a group: VectorGroup for the vector walk, else kByteGroup
  int64_t elements;
  int64_t shape[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t first_block;  // prefix sum of blocks over conversions
};

constexpr int kThreads = 256;
constexpr int kUnroll = 4;       // groups a thread converts per block
constexpr int kBatchBytes = 64;  // source bytes a thread loads before converting any of them
constexpr int kByteGroup = 8;    // elements of a group on the byte walk

// Elements of a group on the vector walk from `from` to `to`: 32 bytes stored, or 64 loaded where
// that is fewer elements.
__host__ __device__ constexpr int VectorGroup(DType from, DType to) {
  const int by_store = 32 / FloatBytes(to), by_load = 64 / FloatBytes(from);
  return by_store < by_load ? by_store : by_load;
}

__host__ __device__ constexpr int64_t ElementsPerBlock(int group) { return int64_t{kThreads} * kUnroll * group; }

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

// The first element of group `u` of this thread in block `local_block` of its conversion, groups
// of `group` elements: the block's threads take consecutive groups, so each load is coalesced.
__device__ int64_t GroupFirst(int64_t local_block, int u, int group) {
  return local_block * ElementsPerBlock(group) + (static_cast<int64_t>(u) * kThreads + threadIdx.x) * group;
}

// kGroup elements of kBytes bytes each, as 32-bit words.
template <int kBytes, int kGroup>
struct GroupWords {
  static constexpr int kWords = kBytes * kGroup / 4;
  uint32_t w[kWords];
};

// Loads the group at `p` (aligned to 16 bytes, or to the group's size where smaller) with vector
// loads.
template <int kBytes, int kGroup>
__device__ void LoadGroup(const unsigned char* p, GroupWords<kBytes, kGroup>& g) {
  constexpr int kWords = GroupWords<kBytes, kGroup>::kWords;
  if constexpr (kWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    g.w[0] = v.x;
    g.w[1] = v.y;
  } else {
    static_assert(kWords % 4 == 0);
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      g.w[4 * i] = v.x;
      g.w[4 * i + 1] = v.y;
      g.w[4 * i + 2] = v.z;
      g.w[4 * i + 3] = v.w;
    }
  }
}

// Stores the group at `p` (aligned as LoadGroup's) with vector stores.
template <int kBytes, int kGroup>
__device__ void StoreGroup(unsigned char* p, const GroupWords<kBytes, kGroup>& g) {
  constexpr int kWords = GroupWords<kBytes, kGroup>::kWords;
  if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(g.w[0], g.w[1]);
  } else {
    static_assert(kWords % 4 == 0);
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      reinterpret_cast<uint4*>(p)[i] = make_uint4(g.w[4 * i], g.w[4 * i + 1], g.w[4 * i + 2], g.w[4 * i + 3]);
    }
  }
}

// Element j's bits of a group, in the low kBytes bytes.
template <int kBytes, int kGroup>
__device__ uint32_t ElementBits(const GroupWords<kBytes, kGroup>& g, int j) {
  if constexpr (kBytes == 4) {
    return g.w[j];
  } else {
    constexpr int kPerWord = 4 / kBytes;
    return g.w[j / kPerWord] >> (8 * kBytes * (j % kPerWord)) & ((1u << (8 * kBytes)) - 1);
  }
}

// Sets element j of a zero-initialised group to `bits` (in the low kBytes bytes).
template <int kBytes, int kGroup>
__device__ void SetElementBits(GroupWords<kBytes, kGroup>& g, int j, uint32_t bits) {
  if constexpr (kBytes == 4) {
    g.w[j] = bits;
  } else {
    constexpr int kPerWord = 4 / kBytes;
    g.w[j / kPerWord] |= bits << (8 * kBytes * (j % kPerWord));
  }
}

// A group from kFrom to kTo with kFn. Into fp8 two elements share one hardware conversion
// (FloatPairToE4m3, FloatPairToE5m2).
template <DType kFrom, DType kTo, ElementFn kFn, int kGroup>
__device__ void ConvertGroup(const GroupWords<FloatBytes(kFrom), kGroup>& in,
                             GroupWords<FloatBytes(kTo), kGroup>& out) {
  if constexpr (kTo == DType::kFP8E4M3 || kTo == DType::kFP8E5M2) {
#pragma unroll
    for (int j = 0; j < kGroup; j += 2) {
      const float lo = TransformFloat(kFn, BitsAsFloat(kFrom, ElementBits(in, j)));
      const float hi = TransformFloat(kFn, BitsAsFloat(kFrom, ElementBits(in, j + 1)));
      const uint32_t pair = kTo == DType::kFP8E4M3 ? FloatPairToE4m3(lo, hi) : FloatPairToE5m2(lo, hi);
      SetElementBits(out, j, pair & 0xffu);
      SetElementBits(out, j + 1, pair >> 8);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) SetElementBits(out, j, TransformBits(kFn, kFrom, kTo, ElementBits(in, j)));
  }
}

// The vector walk of this thread's groups of block `local_block`, from kFrom to kTo with kFn, in
// batches of at most kBatchBytes of source a thread: a batch's loads are all issued before any of
// its groups is converted. The dtypes and the function are template arguments so that the
// conversion compiles to its own instructions, without a branch an element.
template <DType kFrom, DType kTo, ElementFn kFn>
__device__ void ConvertBlockVector(const ConvertDescriptor& d, int64_t local_block) {
  constexpr int kIn = FloatBytes(kFrom), kOut = FloatBytes(kTo), kGroup = VectorGroup(kFrom, kTo);
  constexpr int kFits = kBatchBytes / (kIn * kGroup);
  constexpr int kBatch = kFits < 1 ? 1 : kFits > kUnroll ? kUnroll : kFits;
  static_assert(kUnroll % kBatch == 0);
#pragma unroll
  for (int b = 0; b < kUnroll; b += kBatch) {
    GroupWords<kIn, kGroup> in[kBatch];
    unsigned char* to[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t first = GroupFirst(local_block, b + u, kGroup);
      to[u] = nullptr;
      if (first >= d.elements) continue;
      int64_t src_off, dst_off;
      OffsetsOf(d, first, src_off, dst_off);
      LoadGroup(d.src + src_off, in[u]);
      to[u] = d.dst + dst_off;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (to[u] == nullptr) continue;
      GroupWords<kOut, kGroup> out{};
      ConvertGroup<kFrom, kTo, kFn, kGroup>(in[u], out);
      StoreGroup(to[u], out);
    }
  }
}

// ConvertBlockVector for the conversion's destination dtype (and -exp, which only fp32 takes:
// ElementFnApplies).
template <DType kFrom>
__device__ void ConvertBlockVectorTo(const ConvertDescriptor& d, int64_t local_block) {
  switch (d.dst_dtype) {
    case DType::kBF16: return ConvertBlockVector<kFrom, DType::kBF16, ElementFn::kNone>(d, local_block);
    case DType::kFP16: return ConvertBlockVector<kFrom, DType::kFP16, ElementFn::kNone>(d, local_block);
    case DType::kFP8E4M3:
      return ConvertBlockVector<kFrom, DType::kFP8E4M3, ElementFn::kNone>(d, local_block);
    case DType::kFP8E5M2:
      return ConvertBlockVector<kFrom, DType::kFP8E5M2, ElementFn::kNone>(d, local_block);
    default:
      if (d.fn == ElementFn::kNegExp) {
        return ConvertBlockVector<kFrom, DType::kFP32, ElementFn::kNegExp>(d, local_block);
      }
      return ConvertBlockVector<kFrom, DType::kFP32, ElementFn::kNone>(d, local_block);
  }
}

// ConvertBlockVector for the conversion's dtypes (both IsConvertibleFloat: CheckConvert).
__device__ void ConvertBlockVectorOf(const ConvertDescriptor& d, int64_t local_block) {
  switch (d.src_dtype) {
    case DType::kBF16: return ConvertBlockVectorTo<DType::kBF16>(d, local_block);
    case DType::kFP16: return ConvertBlockVectorTo<DType::kFP16>(d, local_block);
    case DType::kFP8E4M3: return ConvertBlockVectorTo<DType::kFP8E4M3>(d, local_block);
    case DType::kFP8E5M2: return ConvertBlockVectorTo<DType::kFP8E5M2>(d, local_block);
    default: return ConvertBlockVectorTo<DType::kFP32>(d, local_block);
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

// Block `block` of a launch over `descriptors` (`count` of them, their first blocks ascending):
// the last descriptor whose first block is not after it, by binary search, then its part of that
// conversion.
__device__ void ConvertBlockOf(const ConvertDescriptor* __restrict__ descriptors, int count, int64_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const ConvertDescriptor& d = descriptors[lo];
  const int64_t local_block = block - d.first_block;
  if (d.vector) {
    ConvertBlockVectorOf(d, local_block);
    return;
  }
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t first = GroupFirst(local_block, u, kByteGroup);
    if (first >= d.elements) return;
    ConvertGroupBytes(d, first, min(d.elements, first + kByteGroup));
  }
}

// At most 64 registers a thread, so that four blocks fit an SM: the byte walk alone needs more
// and spills, which only it pays for.
__global__ void __launch_bounds__(kThreads, 4)
BatchedConvertKernel(const ConvertDescriptor* __restrict__ descriptors, int count) {
  ConvertBlockOf(descriptors, count, blockIdx.x);
}

// The tables of one LaunchTogether, in the launch's parameters: table t's blocks are the launch's
// blocks [first_block[t], first_block[t + 1]).
struct ConvertTableSet {
  const ConvertDescriptor* descriptors[ConvertTable::kMaxTablesPerLaunch];
  int count[ConvertTable::kMaxTablesPerLaunch];
  int64_t first_block[ConvertTable::kMaxTablesPerLaunch + 1];
  int tables;
};
static_assert(sizeof(ConvertTableSet) <= 4096, "kernel parameters are limited to 4 KiB");

// A block finds its table by binary search over the parameters, then converts its part as
// BatchedConvertKernel does within that table.
__global__ void __launch_bounds__(kThreads, 4) TableSetConvertKernel(const __grid_constant__ ConvertTableSet set) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = set.tables - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (set.first_block[mid] <= block) lo = mid; else hi = mid - 1;
  }
  ConvertBlockOf(set.descriptors[lo], set.count[lo], block - set.first_block[lo]);
}

// Whether every group of `c` takes the vector walk: the innermost dimension dense on both sides
// with a length that is a multiple of VectorGroup, and the base pointers and every outer stride
// multiples of each side's load or store alignment.
bool VectorWalksOf(const StridedConvert& c) {
  const int inner = c.ndim - 1;
  const int64_t src_bytes = DTypeSize(c.src_dtype), dst_bytes = DTypeSize(c.dst_dtype);
  const int64_t group = VectorGroup(c.src_dtype, c.dst_dtype);
  if (c.shape[inner] % group != 0 || c.src_strides[inner] != src_bytes ||
      c.dst_strides[inner] != dst_bytes) {
    return false;
  }
  const int64_t src_align = std::min<int64_t>(group * src_bytes, 16);
  const int64_t dst_align = std::min<int64_t>(group * dst_bytes, 16);
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
  d.vector = VectorWalksOf(c);
  d.group = d.vector ? VectorGroup(c.src_dtype, c.dst_dtype) : kByteGroup;
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
    blocks += (d.elements + ElementsPerBlock(d.group) - 1) / ElementsPerBlock(d.group);
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

Status ConvertTable::LaunchTogether(std::span<const ConvertTable* const> tables) {
  ConvertTableSet set{};
  return LaunchInGroups<ConvertTable>(
      tables, &ConvertTable::converts, kMaxTablesPerLaunch, "ConvertTable::LaunchTogether",
      [&set](const ConvertTable& t) {
        set.descriptors[set.tables] = static_cast<const ConvertDescriptor*>(t.table_);
        set.count[set.tables] = static_cast<int>(t.count_);
        set.first_block[set.tables + 1] = set.first_block[set.tables] + t.blocks_;
        ++set.tables;
      },
      [&set](void* stream) -> Status {
        const int64_t blocks = set.first_block[set.tables];
        if (blocks > 0x7fffffff) return InvalidArgument("batched conversions too large for one launch");
        TableSetConvertKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(set);
        set = ConvertTableSet{};
        return CudaStatus(cudaGetLastError(), "TableSetConvertKernel launch");
      });
}

bool VectorWalks(const StridedConvert& convert) {
  return CheckConvert(convert, 0).ok() && VectorWalksOf(convert);
}

Status LaunchBatchedConvert(const std::vector<StridedConvert>& converts, void* stream) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ConvertTable> table,
                         ConvertTable::Upload(converts, stream));
  return table->Launch();  // the table's memory is freed after the kernel, in stream order
}

}  // namespace ferry::cuda
