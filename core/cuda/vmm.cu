// cuMem* (VMM) export and mapping: see vmm.h.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <string>

#include "core/cuda/vmm.h"

namespace ferry::cuda {
namespace {

// A driver function through the runtime's entry point, looked up once per name.
template <typename F>
Result<F> Driver(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return Unavailable(std::string("the CUDA driver has no ") + name);
  }
  return reinterpret_cast<F>(fn);
}

#define FERRY_DRIVER(name)                                                   \
  static const Result<decltype(&name)> name##_fn = Driver<decltype(&name)>(#name); \
  if (!name##_fn.ok()) return name##_fn.status()

Status DriverStatus(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  static const Result<decltype(&cuGetErrorString)> describe = Driver<decltype(&cuGetErrorString)>("cuGetErrorString");
  const char* text = nullptr;
  if (describe.ok()) (*describe)(result, &text);
  return Internal(what + ": " + (text != nullptr ? text : "CUDA driver error " + std::to_string(result)));
}

// The mapping that holds `address`.
Result<std::pair<CUdeviceptr, size_t>> MappingAt(CUdeviceptr address) {
  FERRY_DRIVER(cuMemGetAddressRange);
  CUdeviceptr base = 0;
  size_t size = 0;
  if ((*cuMemGetAddressRange_fn)(&base, &size, address) != CUDA_SUCCESS || size == 0) {
    return InvalidArgument("device address " + std::to_string(address) + " is not mapped in this process");
  }
  return std::make_pair(base, size);
}

}  // namespace

Result<bool> IsVmmMemory(const void* ptr) {
  FERRY_DRIVER(cuPointerGetAttribute);
  int capable = 1;
  FERRY_RETURN_IF_ERROR(DriverStatus(
      (*cuPointerGetAttribute_fn)(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                  reinterpret_cast<CUdeviceptr>(ptr)),
      "cuPointerGetAttribute(IS_LEGACY_CUDA_IPC_CAPABLE)"));
  return capable == 0;
}

Result<int64_t> VmmBytesFrom(const void* ptr, int64_t limit) {
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr at = start;
  while (static_cast<int64_t>(at - start) < limit) {
    Result<std::pair<CUdeviceptr, size_t>> mapping = MappingAt(at);
    if (!mapping.ok()) break;
    at = mapping->first + mapping->second;
  }
  return static_cast<int64_t>(at - start);
}

Result<std::pair<uintptr_t, uintptr_t>> VmmMappingsAround(const void* ptr, int64_t bytes) {
  if (bytes <= 0) return InvalidArgument("an empty buffer has no mappings");
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  FERRY_ASSIGN_OR_RETURN(auto first, MappingAt(start));
  FERRY_ASSIGN_OR_RETURN(auto last, MappingAt(start + static_cast<CUdeviceptr>(bytes) - 1));
  return std::make_pair(static_cast<uintptr_t>(first.first), static_cast<uintptr_t>(last.first + last.second));
}

Result<VmmSpan> ExportVmmSpan(const void* ptr, int64_t bytes) {
  FERRY_DRIVER(cuMemRetainAllocationHandle);
  FERRY_DRIVER(cuMemExportToShareableHandle);
  FERRY_DRIVER(cuMemRelease);
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  FERRY_ASSIGN_OR_RETURN(auto first, MappingAt(start));
  VmmSpan span;
  span.base = first.first;
  CUdeviceptr at = first.first;
  while (at < start + static_cast<CUdeviceptr>(bytes)) {
    Result<std::pair<CUdeviceptr, size_t>> mapping = MappingAt(at);
    if (!mapping.ok() || mapping->first != at) {
      CloseVmmSpan(span);
      return InvalidArgument("a VMM buffer of " + std::to_string(bytes) + " bytes is not mapped throughout");
    }
    if (static_cast<int64_t>(span.chunks.size()) == kMaxVmmChunks) {
      CloseVmmSpan(span);
      return InvalidArgument("a VMM buffer spans more than " + std::to_string(kMaxVmmChunks) + " mappings");
    }
    CUmemGenericAllocationHandle handle = 0;
    Status status = DriverStatus((*cuMemRetainAllocationHandle_fn)(&handle, reinterpret_cast<void*>(at)),
                                 "cuMemRetainAllocationHandle");
    int fd = -1;
    if (status.ok()) {
      status = DriverStatus((*cuMemExportToShareableHandle_fn)(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                            "exporting a VMM allocation as a POSIX fd (was it created with "
                            "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested?)");
      (*cuMemRelease_fn)(handle);
    }
    if (!status.ok()) {
      CloseVmmSpan(span);
      return status;
    }
    span.chunks.push_back({static_cast<int64_t>(at - span.base), static_cast<int64_t>(mapping->second), fd, 0});
    at += mapping->second;
  }
  span.bytes = static_cast<int64_t>(at - span.base);
  return span;
}

void CloseVmmSpan(VmmSpan& span) {
  for (VmmChunk& c : span.chunks) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }
  span.chunks.clear();
}

Result<void*> MapVmmSpan(const std::vector<VmmChunk>& chunks, int64_t span_bytes, int device) {
  auto close_all = [&chunks] {
    for (const VmmChunk& c : chunks) {
      if (c.fd >= 0) ::close(c.fd);
    }
  };
  FERRY_DRIVER(cuMemImportFromShareableHandle);
  FERRY_DRIVER(cuMemAddressReserve);
  FERRY_DRIVER(cuMemMap);
  FERRY_DRIVER(cuMemSetAccess);
  FERRY_DRIVER(cuMemRelease);
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    close_all();
    return Internal("cudaSetDevice(" + std::to_string(device) + ")");
  }
  CUdeviceptr base = 0;
  Status status = DriverStatus((*cuMemAddressReserve_fn)(&base, static_cast<size_t>(span_bytes), 0, 0, 0),
                               "reserving " + std::to_string(span_bytes) + " bytes for a peer's VMM buffer");
  size_t mapped = 0;
  for (size_t i = 0; i < chunks.size() && status.ok(); ++i) {
    const VmmChunk& c = chunks[i];
    CUmemGenericAllocationHandle handle = 0;
    status = DriverStatus((*cuMemImportFromShareableHandle_fn)(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(c.fd)),
                                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                          "importing a peer's VMM allocation");
    if (!status.ok()) break;
    status = DriverStatus((*cuMemMap_fn)(base + c.offset, static_cast<size_t>(c.bytes), 0, handle, 0),
                          "mapping a peer's VMM allocation");
    (*cuMemRelease_fn)(handle);  // the mapping keeps the allocation
    if (status.ok()) mapped = i + 1;
  }
  close_all();
  if (status.ok()) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = DriverStatus((*cuMemSetAccess_fn)(base, static_cast<size_t>(span_bytes), &access, 1),
                          "enabling access to a peer's VMM buffer");
  }
  if (!status.ok()) {
    if (base != 0) {
      FERRY_DRIVER(cuMemUnmap);
      FERRY_DRIVER(cuMemAddressFree);
      for (size_t i = 0; i < mapped; ++i) (*cuMemUnmap_fn)(base + chunks[i].offset, static_cast<size_t>(chunks[i].bytes));
      (*cuMemAddressFree_fn)(base, static_cast<size_t>(span_bytes));
    }
    return status;
  }
  return reinterpret_cast<void*>(base);
}

Status UnmapVmmSpan(void* base, const std::vector<VmmChunk>& chunks, int64_t span_bytes) {
  FERRY_DRIVER(cuMemUnmap);
  FERRY_DRIVER(cuMemAddressFree);
  const auto at = reinterpret_cast<CUdeviceptr>(base);
  Status status;
  for (const VmmChunk& c : chunks) {
    Status unmapped = DriverStatus((*cuMemUnmap_fn)(at + c.offset, static_cast<size_t>(c.bytes)), "cuMemUnmap");
    if (status.ok()) status = unmapped;
  }
  Status freed = DriverStatus((*cuMemAddressFree_fn)(at, static_cast<size_t>(span_bytes)), "cuMemAddressFree");
  return status.ok() ? freed : status;
}

Result<VmmAllocation> AllocateVmm(int64_t bytes, int64_t chunk_bytes, int device) {
  FERRY_DRIVER(cuMemGetAllocationGranularity);
  FERRY_DRIVER(cuMemCreate);
  FERRY_DRIVER(cuMemRelease);
  FERRY_DRIVER(cuMemAddressReserve);
  FERRY_DRIVER(cuMemMap);
  FERRY_DRIVER(cuMemSetAccess);
  if (bytes <= 0 || chunk_bytes <= 0) return InvalidArgument("a VMM allocation needs positive sizes");
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return Internal("cudaSetDevice(" + std::to_string(device) + ")");
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  FERRY_RETURN_IF_ERROR(DriverStatus(
      (*cuMemGetAllocationGranularity_fn)(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      "cuMemGetAllocationGranularity"));
  const auto g = static_cast<int64_t>(granularity);
  VmmAllocation out;
  out.chunk_bytes = (chunk_bytes + g - 1) / g * g;
  out.bytes = (bytes + out.chunk_bytes - 1) / out.chunk_bytes * out.chunk_bytes;
  CUdeviceptr base = 0;
  FERRY_RETURN_IF_ERROR(DriverStatus((*cuMemAddressReserve_fn)(&base, static_cast<size_t>(out.bytes), 0, 0, 0),
                                     "cuMemAddressReserve"));
  out.base = reinterpret_cast<void*>(base);
  std::vector<VmmChunk> mapped;
  Status status;
  for (int64_t at = 0; at < out.bytes && status.ok(); at += out.chunk_bytes) {
    CUmemGenericAllocationHandle handle = 0;
    status = DriverStatus((*cuMemCreate_fn)(&handle, static_cast<size_t>(out.chunk_bytes), &prop, 0), "cuMemCreate");
    if (!status.ok()) break;
    status = DriverStatus((*cuMemMap_fn)(base + at, static_cast<size_t>(out.chunk_bytes), 0, handle, 0), "cuMemMap");
    (*cuMemRelease_fn)(handle);  // the mapping keeps the allocation
    if (status.ok()) mapped.push_back({at, out.chunk_bytes, -1, 0});
  }
  if (status.ok()) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = DriverStatus((*cuMemSetAccess_fn)(base, static_cast<size_t>(out.bytes), &access, 1), "cuMemSetAccess");
  }
  if (!status.ok()) {
    (void)UnmapVmmSpan(out.base, mapped, out.bytes);
    return status;
  }
  return out;
}

Status FreeVmm(const VmmAllocation& allocation) {
  std::vector<VmmChunk> chunks;
  for (int64_t at = 0; at < allocation.bytes; at += allocation.chunk_bytes) {
    chunks.push_back({at, allocation.chunk_bytes, -1, 0});
  }
  return UnmapVmmSpan(allocation.base, chunks, allocation.bytes);
}

}  // namespace ferry::cuda
