// The block-quantize kernel of core/cuda/block_quantize.h: a grid over (job, 128x128 block), the
// block of a CUDA block found by binary search over the jobs' prefix sums of blocks. 256 threads
// walk the block's elements (thread t: column t % 128, every second row), reduce |x| in shared
// memory with NaN propagating (core/base/fp8_block.h Fp8BlockAmaxStep), thread 0 computes the
// block's parameters, threads 0..127 write the scale (one fp32 from thread 0, or each its weight
// row's packed E8M0 code, Fp8BlockWriteScaleRow), then every thread casts its elements with them
// (Fp8BlockParamsOf: UE8M0 scales requantize each element in the same thread, no second
// reduction). Elements are loaded byte by
// byte (LoadAsFloat): a staging slot may start at any byte.
#include <cuda_runtime.h>

#include <string>

#include "core/base/fp8_block.h"
#include "core/cuda/block_quantize.h"
#include "core/cuda/device_table.cuh"

namespace ferry::cuda {
namespace {

struct QuantizeDescriptor {
  const unsigned char* src;
  unsigned char* dst;
  unsigned char* scales;
  DType src_dtype;
  Fp8ScaleFormat scale_fmt;
  int64_t rows, cols, block_rows, block_cols;
  int64_t first_block;  // prefix sum of 128x128 blocks over jobs
};

constexpr int kThreads = 256;
constexpr int kBlock = static_cast<int>(kFp8BlockSize);

__global__ void BlockQuantizeKernel(const QuantizeDescriptor* descriptors, int count) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const QuantizeDescriptor& d = descriptors[lo];
  const int64_t k = block - d.first_block;
  const int64_t per_matrix = d.block_rows * d.block_cols;
  const int64_t m = k / per_matrix, br = k % per_matrix / d.block_cols, bc = k % d.block_cols;
  const int64_t r0 = br * kBlock, c0 = bc * kBlock;
  const int64_t r1 = min(d.rows, r0 + kBlock), c = c0 + threadIdx.x % kBlock;
  const int64_t base = m * d.rows * d.cols;
  const int elem = FloatBytes(d.src_dtype);
  float amax = 0.0f;
  if (c < d.cols) {
    for (int64_t r = r0 + threadIdx.x / kBlock; r < r1; r += kThreads / kBlock) {
      amax = Fp8BlockAmaxStep(amax, LoadAsFloat(d.src_dtype, d.src + (base + r * d.cols + c) * elem));
    }
  }
  __shared__ float partial[kThreads];
  __shared__ Fp8BlockParams params;
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] = Fp8BlockAmaxStep(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) params = Fp8BlockParamsOf(partial[0], d.scale_fmt);
  __syncthreads();
  if (threadIdx.x < kBlock) {
    Fp8BlockWriteScaleRow(d.scales, d.scale_fmt, d.rows, d.cols, k, params.scale_inv, threadIdx.x);
  }
  if (c >= d.cols) return;
  for (int64_t r = r0 + threadIdx.x / kBlock; r < r1; r += kThreads / kBlock) {
    const int64_t i = base + r * d.cols + c;
    d.dst[i] = Fp8BlockQuantizeElement(LoadAsFloat(d.src_dtype, d.src + i * elem), params);
  }
}

Status CheckJob(const BlockQuantizeJob& j, size_t i) {
  const std::string name = "block quantize job " + std::to_string(i);
  if (j.src_dtype != DType::kBF16 && j.src_dtype != DType::kFP16 && j.src_dtype != DType::kFP32) {
    return InvalidArgument(name + ": no block quantization from " +
                           std::string(DTypeName(j.src_dtype)));
  }
  if (j.matrices < 0 || j.rows < 0 || j.cols < 0) {
    return InvalidArgument(name + ": negative size");
  }
  if (j.scale_fmt != Fp8ScaleFormat::kFloat32 && j.scale_fmt != Fp8ScaleFormat::kUe8m0 &&
      j.scale_fmt != Fp8ScaleFormat::kUe8m0Packed) {
    return InvalidArgument(name + ": unknown scale format");
  }
  if (reinterpret_cast<uintptr_t>(j.scales) % 4 != 0) {
    return InvalidArgument(name + ": scales not 4-byte aligned");
  }
  return Status::Ok();
}

}  // namespace

Status LaunchBlockQuantize(const std::vector<BlockQuantizeJob>& jobs, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<QuantizeDescriptor> descriptors;
  descriptors.reserve(jobs.size());
  int64_t blocks = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const BlockQuantizeJob& j = jobs[i];
    FERRY_RETURN_IF_ERROR(CheckJob(j, i));
    QuantizeDescriptor d{};
    d.src = static_cast<const unsigned char*>(j.src);
    d.dst = static_cast<unsigned char*>(j.dst);
    d.scales = static_cast<unsigned char*>(j.scales);
    d.src_dtype = j.src_dtype;
    d.scale_fmt = j.scale_fmt;
    d.rows = j.rows;
    d.cols = j.cols;
    d.block_rows = (j.rows + kBlock - 1) / kBlock;
    d.block_cols = (j.cols + kBlock - 1) / kBlock;
    const int64_t count = j.matrices * d.block_rows * d.block_cols;
    if (count == 0) continue;
    d.first_block = blocks;
    blocks += count;
    descriptors.push_back(d);
  }
  if (descriptors.empty()) return Status::Ok();
  if (blocks > 0x7fffffff) return InvalidArgument("block quantize too large for one launch");
  FERRY_ASSIGN_OR_RETURN(
      void* table, UploadTable({std::as_bytes(std::span(descriptors))}, stream, "quantize descriptors"));
  BlockQuantizeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const QuantizeDescriptor*>(table), static_cast<int>(descriptors.size()));
  const Status launched = CudaStatus(cudaGetLastError(), "BlockQuantizeKernel launch");
  const Status freed = CudaStatus(cudaFreeAsync(table, stream), "cudaFreeAsync(quantize descriptors)");
  return launched.ok() ? freed : launched;
}

}  // namespace ferry::cuda
