// For the .cu files of the batched kernels: the Status of a CUDA runtime call, the
// stream-ordered upload of a kernel's descriptor table (the descriptors a launch reads, built on
// the host each launch or once for a CopyTable/ConvertTable), and the grouping of uploaded tables
// into launches (their LaunchTogether).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
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

// Groups the non-empty `tables` (their (table->*entries)() descriptors; all uploaded on one
// stream, table->stream()) into launches of at most `per_launch` tables: add(table) for each, and
// launch(stream) once a launch's tables are added. `what` names the caller in errors. Stops at the
// first error.
template <typename Table>
Status LaunchInGroups(std::span<const Table* const> tables, int64_t (Table::*entries)() const, int per_launch,
                      const std::string& what, const std::function<void(const Table&)>& add,
                      const std::function<Status(void* stream)>& launch) {
  void* stream = nullptr;
  int added = 0;
  for (const Table* t : tables) {
    if ((t->*entries)() == 0) continue;
    if (added > 0 && t->stream() != stream) return InvalidArgument(what + ": tables uploaded on different streams");
    stream = t->stream();
    add(*t);
    if (++added == per_launch) {
      FERRY_RETURN_IF_ERROR(launch(stream));
      added = 0;
    }
  }
  return added > 0 ? launch(stream) : Status::Ok();
}

}  // namespace ferry::cuda
