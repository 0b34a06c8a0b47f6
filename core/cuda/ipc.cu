// CUDA IPC export and reference-counted opening: see ipc.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/ipc.h"
#include "core/cuda/pointer.h"

namespace ferry::cuda {
namespace {

Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Internal(what + ": " + cudaGetErrorString(err));
}

struct Opened {
  void* base;
  int users;
};
std::mutex& OpenedMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
// Handle bytes -> open allocation; a process-wide table because the driver maps one handle once
// per context.
std::map<IpcHandle, Opened>& OpenedTable() {
  static auto* table = new std::map<IpcHandle, Opened>;
  return *table;
}

}  // namespace

Result<IpcExport> ExportIpcMemory(const void* ptr) {
  Result<Allocation> allocation = AllocationOf(ptr);
  if (!allocation.ok()) return allocation.status().WithContext("CUDA IPC");
  const auto base = static_cast<CUdeviceptr>(allocation->base);
  const auto size = static_cast<size_t>(allocation->bytes);
  cudaIpcMemHandle_t handle;
  FERRY_RETURN_IF_ERROR(CudaStatus(
      cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)),
      "cudaIpcGetMemHandle: a GPU direct read offers only cudaMalloc memory through legacy CUDA "
      "IPC, not cuMem* (VMM) memory such as PyTorch's expandable_segments or vLLM's sleep-mode "
      "pool; allocate the source with cudaMalloc or set executor.direct_intra_node=false to "
      "stage it through the transport"));
  IpcExport out;
  static_assert(sizeof(handle) == kIpcHandleBytes);
  std::memcpy(out.handle.data(), &handle, kIpcHandleBytes);
  out.allocation_bytes = static_cast<int64_t>(size);
  out.offset = static_cast<int64_t>(reinterpret_cast<CUdeviceptr>(ptr) - base);
  return out;
}

Result<void*> OpenIpcMemory(const IpcHandle& handle, int device) {
  std::lock_guard<std::mutex> lock(OpenedMutex());
  auto it = OpenedTable().find(handle);
  if (it != OpenedTable().end()) {
    ++it->second.users;
    return it->second.base;
  }
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), kIpcHandleBytes);
  void* base = nullptr;
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess),
                                   "cudaIpcOpenMemHandle of a peer's buffer"));
  OpenedTable()[handle] = {base, 1};
  return base;
}

Status CloseIpcMemory(void* base) {
  std::lock_guard<std::mutex> lock(OpenedMutex());
  for (auto it = OpenedTable().begin(); it != OpenedTable().end(); ++it) {
    if (it->second.base != base) continue;
    if (--it->second.users > 0) return Status::Ok();
    OpenedTable().erase(it);
    return CudaStatus(cudaIpcCloseMemHandle(base), "cudaIpcCloseMemHandle");
  }
  return InvalidArgument("CUDA IPC: no open peer allocation at this address");
}

}  // namespace ferry::cuda
