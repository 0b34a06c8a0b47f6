// The generic box-sum kernel behind the fragment checksums (nvcc only): one launch sums a term per
// element over many strided boxes. A box is a SumDescriptor: `shape` and `strides` walk its
// elements in row-major order from `base`, giving each element a position (`base` plus the sum of
// index times stride: a byte address for memory, a global element index for a generated pattern),
// and `Term` turns (descriptor, element index in the box, position) into the element's term.
//
// Blocks are spread over the boxes in proportion to their elements (a prefix sum of blocks, found by
// binary search, as in the batched copy). Each thread sums its elements' terms, each warp adds its
// threads' sums with shuffles, and lane 0 adds the warp's sum to the box's slot with one 64-bit
// atomicAdd: wrapping addition is associative and commutative, so the order of the adds does not
// change the bits. Used by core/cuda/box_checksum.cu and tools/cli/pattern_checksum_gpu.cu.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

struct SumDescriptor {
  int64_t base;  // position of the first element
  int ndim;
  int width;     // element bytes, for a Term that reads memory
  int64_t shape[kMaxCopyDims];
  int64_t strides[kMaxCopyDims];
  int64_t elements;
  int64_t first_block;  // prefix sum of blocks over boxes (SumBoxes sets it)
  int box;              // the slot of the sums array
};

inline constexpr int kSumThreads = 256;
inline constexpr int64_t kSumElementsPerBlock = kSumThreads * 16;

// Position offset of row `row` (row-major over the box's dims but the last) from the box's base.
// `Index` is uint32_t when the box's extents and element count fit, since 64-bit division is
// several times slower.
template <typename Index>
__device__ inline int64_t SumRowOffset(const SumDescriptor& d, Index row) {
  int64_t offset = 0;
  for (int dim = d.ndim - 2; dim >= 0; --dim) {
    const Index extent = static_cast<Index>(d.shape[dim]);
    const Index next = row / extent;
    offset += static_cast<int64_t>(row - next * extent) * d.strides[dim];
    row = next;
  }
  return offset;
}

// The sum of the terms of elements begin + threadIdx.x, + blockDim.x, ... below `end`. The thread
// divides once to find its first element's row and column, then steps through rows and columns
// by addition; only a change of row costs the divisions of SumRowOffset.
template <typename Index, typename Term>
__device__ inline unsigned long long SumRange(const SumDescriptor& d, int64_t begin, int64_t end, const Term& term) {
  const Index first = static_cast<Index>(begin + threadIdx.x);
  if (static_cast<int64_t>(first) >= end) return 0;
  const Index length = static_cast<Index>(d.shape[d.ndim - 1]);
  const int64_t inner_stride = d.strides[d.ndim - 1];
  const Index step = blockDim.x, row_step = step / length, col_step = step - row_step * length;
  Index row = first / length, col = first - row * length;
  int64_t row_offset = SumRowOffset<Index>(d, row);
  unsigned long long acc = 0;
  for (Index e = first; static_cast<int64_t>(e) < end; e += step) {
    acc += term(d, static_cast<uint64_t>(e), d.base + row_offset + static_cast<int64_t>(col) * inner_stride);
    const Index before = row;
    row += row_step;
    col += col_step;
    if (col >= length) {
      col -= length;
      ++row;
    }
    if (row != before && d.ndim > 1) row_offset = SumRowOffset<Index>(d, row);
  }
  return acc;
}

template <typename Term>
__global__ void BoxSumKernel(const SumDescriptor* descriptors, int count, unsigned long long* sums, Term term) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const SumDescriptor& d = descriptors[lo];
  const int64_t begin = (block - d.first_block) * kSumElementsPerBlock;
  const int64_t end = min(d.elements, begin + kSumElementsPerBlock);
  unsigned long long acc = d.elements < (int64_t{1} << 31) ? SumRange<uint32_t>(d, begin, end, term)
                                                           : SumRange<uint64_t>(d, begin, end, term);
  for (int delta = 16; delta > 0; delta /= 2) acc += __shfl_down_sync(0xffffffffu, acc, delta);
  if ((threadIdx.x & 31) == 0) atomicAdd(&sums[d.box], acc);
}

inline Status CudaCall(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// The sums of `descriptors` (non-empty boxes; their `box` slots index the result of `num_sums`
// sums, 0 where no box adds), by one launch on `stream`. Blocks until the sums are on the host.
template <typename Term>
Result<std::vector<uint64_t>> SumBoxes(std::vector<SumDescriptor> descriptors, size_t num_sums, const Term& term,
                                       cudaStream_t stream) {
  std::vector<uint64_t> sums(num_sums, 0);
  int64_t blocks = 0;
  for (SumDescriptor& d : descriptors) {
    d.first_block = blocks;
    blocks += (d.elements + kSumElementsPerBlock - 1) / kSumElementsPerBlock;
  }
  if (blocks > 0x7fffffff) return InvalidArgument("box sums: too many elements for one launch");
  if (descriptors.empty()) return sums;
  const size_t table_bytes = descriptors.size() * sizeof(SumDescriptor);
  const size_t sum_bytes = num_sums * sizeof(uint64_t);
  char* scratch = nullptr;  // the descriptor table, then the sums
  FERRY_RETURN_IF_ERROR(CudaCall(cudaMallocAsync(reinterpret_cast<void**>(&scratch), table_bytes + sum_bytes, stream),
                                 "cudaMallocAsync(box sums)"));
  auto* table = reinterpret_cast<SumDescriptor*>(scratch);
  auto* device_sums = reinterpret_cast<unsigned long long*>(scratch + table_bytes);
  Status status = CudaCall(cudaMemcpyAsync(table, descriptors.data(), table_bytes, cudaMemcpyHostToDevice, stream),
                           "cudaMemcpyAsync(box sum descriptors)");
  if (status.ok()) status = CudaCall(cudaMemsetAsync(device_sums, 0, sum_bytes, stream), "cudaMemsetAsync(box sums)");
  if (status.ok()) {
    BoxSumKernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(
        table, static_cast<int>(descriptors.size()), device_sums, term);
    status = CudaCall(cudaGetLastError(), "BoxSumKernel launch");
  }
  if (status.ok()) {
    status = CudaCall(cudaMemcpyAsync(sums.data(), device_sums, sum_bytes, cudaMemcpyDeviceToHost, stream),
                      "cudaMemcpyAsync(box sums)");
  }
  const Status freed = CudaCall(cudaFreeAsync(scratch, stream), "cudaFreeAsync(box sums)");
  const Status done = CudaCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize(box sums)");
  FERRY_RETURN_IF_ERROR(status);
  FERRY_RETURN_IF_ERROR(freed);
  FERRY_RETURN_IF_ERROR(done);
  return sums;
}

}  // namespace ferry::cuda
