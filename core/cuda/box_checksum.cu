// The box-checksum kernel and the host wrappers of core/cuda/box_checksum.h.
//
// Blocks are spread over the boxes in proportion to their elements (a prefix sum of blocks, found
// by binary search, as in the batched copy). Each thread sums the terms of its elements, each warp
// adds its threads' sums with shuffles, and lane 0 adds the warp's sum to the box's slot with one
// 64-bit atomicAdd: wrapping addition is associative and commutative, so the order of the adds
// does not change the bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/base/checksum_term.h"
#include "core/cuda/box_checksum.h"

namespace ferry::cuda {
namespace {

struct SumDescriptor {
  const unsigned char* base;
  int ndim;
  int elem_size;
  int64_t shape[kMaxCopyDims];
  int64_t strides[kMaxCopyDims];
  int64_t elements;
  int64_t first_block;  // prefix sum of blocks over boxes
  int box;              // the slot of the sums array
};

constexpr int kThreads = 256;
constexpr int64_t kElementsPerBlock = kThreads * 16;

// The element at `p` as a little-endian unsigned integer of `size` bytes; typed loads when aligned.
__device__ inline uint64_t LoadElement(const unsigned char* p, int size) {
  if ((reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(size - 1)) == 0) {
    switch (size) {
      case 1: return *p;
      case 2: return *reinterpret_cast<const uint16_t*>(p);
      case 4: return *reinterpret_cast<const uint32_t*>(p);
      default: return *reinterpret_cast<const unsigned long long*>(p);
    }
  }
  uint64_t v = 0;
  for (int i = 0; i < size; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Byte offset of element `e` (row-major over the box) from the box's base.
__device__ inline int64_t ElementOffset(const SumDescriptor& d, int64_t e) {
  const int last = d.ndim - 1;
  int64_t row = e / d.shape[last];
  int64_t offset = (e - row * d.shape[last]) * d.strides[last];
  for (int dim = last - 1; dim >= 0; --dim) {
    const int64_t idx = row % d.shape[dim];
    row /= d.shape[dim];
    offset += idx * d.strides[dim];
  }
  return offset;
}

__global__ void BoxChecksumKernel(const SumDescriptor* descriptors, int count,
                                  unsigned long long* sums) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const SumDescriptor& d = descriptors[lo];
  const int64_t begin = (block - d.first_block) * kElementsPerBlock;
  const int64_t end = min(d.elements, begin + kElementsPerBlock);
  unsigned long long acc = 0;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    acc += BoxChecksumTerm(static_cast<uint64_t>(e), LoadElement(d.base + ElementOffset(d, e), d.elem_size));
  }
  for (int delta = 16; delta > 0; delta /= 2) acc += __shfl_down_sync(0xffffffffu, acc, delta);
  if ((threadIdx.x & 31) == 0) atomicAdd(&sums[d.box], acc);
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// Checks `box` (number `i`) and returns its element count.
Result<int64_t> CheckBox(const StridedCopy& box, size_t i) {
  const std::string name = "box checksum " + std::to_string(i) + ": ";
  if (box.ndim < 1 || box.ndim > kMaxCopyDims) {
    return InvalidArgument(name + std::to_string(box.ndim) + " dims (1 to " + std::to_string(kMaxCopyDims) + ")");
  }
  if (box.elem_size != 1 && box.elem_size != 2 && box.elem_size != 4 && box.elem_size != 8) {
    return InvalidArgument(name + "element of " + std::to_string(box.elem_size) + " bytes (1, 2, 4 or 8)");
  }
  int64_t elements = 1;
  for (int d = 0; d < box.ndim; ++d) {
    if (box.shape[d] < 0) return InvalidArgument(name + "negative extent in dim " + std::to_string(d));
    elements *= box.shape[d];
  }
  if (elements > 0 && box.src == nullptr) return InvalidArgument(name + "no memory");
  return elements;
}

// The descriptors of the non-empty boxes and the number of blocks they need.
Result<std::vector<SumDescriptor>> Describe(const std::vector<StridedCopy>& boxes, int64_t* blocks) {
  std::vector<SumDescriptor> out;
  *blocks = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(int64_t elements, CheckBox(boxes[i], i));
    if (elements == 0) continue;
    SumDescriptor d{};
    d.base = static_cast<const unsigned char*>(boxes[i].src);
    d.ndim = boxes[i].ndim;
    d.elem_size = static_cast<int>(boxes[i].elem_size);
    std::copy_n(boxes[i].shape.begin(), d.ndim, d.shape);
    std::copy_n(boxes[i].src_strides.begin(), d.ndim, d.strides);
    d.elements = elements;
    d.first_block = *blocks;
    d.box = static_cast<int>(i);
    *blocks += (elements + kElementsPerBlock - 1) / kElementsPerBlock;
    out.push_back(d);
  }
  if (*blocks > 0x7fffffff) return InvalidArgument("box checksums: too many elements for one launch");
  return out;
}

}  // namespace

Result<std::vector<uint64_t>> BoxChecksums(const std::vector<StridedCopy>& boxes, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int64_t blocks = 0;
  FERRY_ASSIGN_OR_RETURN(std::vector<SumDescriptor> descriptors, Describe(boxes, &blocks));
  std::vector<uint64_t> sums(boxes.size(), 0);
  if (descriptors.empty()) return sums;
  const size_t table_bytes = descriptors.size() * sizeof(SumDescriptor);
  const size_t sum_bytes = sums.size() * sizeof(uint64_t);
  char* scratch = nullptr;  // the descriptor table, then the sums
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&scratch), table_bytes + sum_bytes, stream),
                                   "cudaMallocAsync(box checksums)"));
  auto* table = reinterpret_cast<SumDescriptor*>(scratch);
  auto* device_sums = reinterpret_cast<unsigned long long*>(scratch + table_bytes);
  Status status = CudaStatus(cudaMemcpyAsync(table, descriptors.data(), table_bytes, cudaMemcpyHostToDevice, stream),
                             "cudaMemcpyAsync(checksum descriptors)");
  if (status.ok()) status = CudaStatus(cudaMemsetAsync(device_sums, 0, sum_bytes, stream), "cudaMemsetAsync(sums)");
  if (status.ok()) {
    BoxChecksumKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        table, static_cast<int>(descriptors.size()), device_sums);
    status = CudaStatus(cudaGetLastError(), "BoxChecksumKernel launch");
  }
  if (status.ok()) {
    status = CudaStatus(cudaMemcpyAsync(sums.data(), device_sums, sum_bytes, cudaMemcpyDeviceToHost, stream),
                        "cudaMemcpyAsync(sums)");
  }
  const Status freed = CudaStatus(cudaFreeAsync(scratch, stream), "cudaFreeAsync(box checksums)");
  const Status done = CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize(box checksums)");
  FERRY_RETURN_IF_ERROR(status);
  FERRY_RETURN_IF_ERROR(freed);
  FERRY_RETURN_IF_ERROR(done);
  return sums;
}

uint64_t HostBoxChecksum(const StridedCopy& box) {
  int64_t elements = 1;
  for (int d = 0; d < box.ndim; ++d) elements *= box.shape[d];
  const auto* base = static_cast<const unsigned char*>(box.src);
  uint64_t sum = 0;
  for (int64_t e = 0; e < elements; ++e) {
    int64_t rest = e, offset = 0;
    for (int d = box.ndim - 1; d >= 0; --d) {
      offset += (rest % box.shape[d]) * box.src_strides[d];
      rest /= box.shape[d];
    }
    uint64_t value = 0;
    for (int64_t b = 0; b < box.elem_size; ++b) value |= static_cast<uint64_t>(base[offset + b]) << (8 * b);
    sum += BoxChecksumTerm(static_cast<uint64_t>(e), value);
  }
  return sum;
}

}  // namespace ferry::cuda
