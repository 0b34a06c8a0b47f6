// The batched convert kernel of core/cuda/batched_convert.h: a grid over (conversion, element),
// each block converting up to kElementsPerBlock consecutive elements (row-major over the shape)
// of one conversion, found by binary search over the blocks' prefix sums. Elements are loaded and
// stored byte by byte (TransformElement: the conversion and any element function): staging packs
// regions of different dtypes back to back, so a region may start at any byte.
#include <cuda_runtime.h>

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
  int ndim;
  int64_t elements;
  int64_t shape[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t first_block;  // prefix sum of blocks over conversions
};

constexpr int kThreads = 256;
constexpr int64_t kElementsPerBlock = kThreads * 8;

__global__ void BatchedConvertKernel(const ConvertDescriptor* descriptors, int count) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const ConvertDescriptor& d = descriptors[lo];
  const int64_t begin = (block - d.first_block) * kElementsPerBlock;
  const int64_t end = min(d.elements, begin + kElementsPerBlock);
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    int64_t rest = e, src_off = 0, dst_off = 0;
    for (int dim = d.ndim - 1; dim >= 0; --dim) {
      const int64_t idx = rest % d.shape[dim];
      rest /= d.shape[dim];
      src_off += idx * d.src_strides[dim];
      dst_off += idx * d.dst_strides[dim];
    }
    TransformElement(d.fn, d.src_dtype, d.dst_dtype, d.src + src_off, d.dst + dst_off);
  }
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
