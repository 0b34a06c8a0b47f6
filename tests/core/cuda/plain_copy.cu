// The plain copy kernel of plain_copy.h.
#include <cuda_runtime.h>

#include <string>

#include "tests/core/cuda/plain_copy.h"

namespace ferry::cuda {
namespace {

// Four words a thread in flight per step, then the remainder one at a time.
__global__ void PlainCopyKernel(uint4* dst, const uint4* src, int64_t words) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < words; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < words; i += stride) dst[i] = src[i];
}

}  // namespace

Status LaunchPlainCopy(void* dst, const void* src, int64_t bytes, void* stream) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    return InvalidArgument("plain copy: bytes and pointers must be multiples of 16");
  }
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  constexpr int kThreads = 512;
  const int blocks = (sms > 0 ? sms : 1) * 4;  // 2048 threads an SM: the most Hopper keeps resident
  PlainCopyKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), bytes / 16);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(std::string("PlainCopyKernel: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace ferry::cuda
