// For the .cu files of the batched kernels: the Status of a CUDA runtime call, and the
// stream-ordered upload of a kernel's descriptor table (the descriptors a launch reads, built on
// the host each launch or once for a CopyTable/ConvertTable).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>

#include "core/base/status.h"

namespace ferry::cuda {

inline Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(what + ": " + cudaGetErrorString(err));
}

// One stream-ordered device allocation on `stream` holding `parts` back to back, copied from host
// memory. From pageable memory each copy is staged before cudaMemcpyAsync returns, so the parts
// may be freed on return. The caller frees the table with cudaFreeAsync on `stream`, after the
// launches that read it; on failure nothing stays allocated. `what` names the table in errors.
inline Result<void*> UploadTable(std::initializer_list<std::span<const std::byte>> parts,
                                 cudaStream_t stream, const std::string& what) {
  size_t bytes = 0;
  for (const auto& part : parts) bytes += part.size();
  char* table = nullptr;
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&table), bytes, stream),
                                   "cudaMallocAsync(" + what + ")"));
  size_t at = 0;
  for (const auto& part : parts) {
    Status copied = CudaStatus(
        cudaMemcpyAsync(table + at, part.data(), part.size(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(" + what + ")");
    if (!copied.ok()) {
      cudaFreeAsync(table, stream);
      return copied;
    }
    at += part.size();
  }
  return static_cast<void*>(table);
}

}  // namespace ferry::cuda
