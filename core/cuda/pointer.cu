// Device pointer queries: see pointer.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/pointer.h"

namespace ferry::cuda {
namespace {

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cuMemGetAddressRange through the runtime's driver entry point (no link against libcuda).
Result<GetAddressRange> AddressRangeFunction() {
  static void* fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<void*>(nullptr);
    }
    return f;
  }();
  if (fn == nullptr) return Unavailable("the CUDA driver has no cuMemGetAddressRange");
  return reinterpret_cast<GetAddressRange>(fn);
}

const char* KindName(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeManaged: return "managed (unified) memory";
    case cudaMemoryTypeUnregistered: return "memory CUDA does not know (ordinary host memory?)";
    default: return "device memory";
  }
}

}  // namespace

Result<Allocation> AllocationOf(const void* ptr) {
  FERRY_ASSIGN_OR_RETURN(GetAddressRange range, AddressRangeFunction());
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return InvalidArgument("the pointer is not in a device allocation of this process");
  }
  return Allocation{static_cast<uintptr_t>(base), static_cast<int64_t>(size)};
}

Result<DevicePointer> DescribeDevicePointer(const void* ptr) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return FailedPrecondition("CUDA memory was given but no CUDA device is visible to this process");
  }
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument("CUDA does not know the pointer");
  }
  if (attributes.type != cudaMemoryTypeDevice) {
    return InvalidArgument(std::string("the pointer is ") + KindName(attributes.type) +
                           ", not device memory");
  }
  FERRY_ASSIGN_OR_RETURN(Allocation allocation, AllocationOf(ptr));
  const auto offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(ptr) - allocation.base);
  return DevicePointer{attributes.device, allocation.bytes - offset};
}

Status SynchronizeDevice(int device) {
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  const cudaError_t restored = cudaSetDevice(current);
  if (err == cudaSuccess) err = restored;
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Internal("waiting for CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(err));
}

Status SynchronizeStreamOn(int device, void* stream) {
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  const cudaError_t restored = cudaSetDevice(current);
  if (err == cudaSuccess) err = restored;
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Internal("waiting for the caller's CUDA stream on device " + std::to_string(device) +
                  ": " + cudaGetErrorString(err));
}

Result<std::array<uint8_t, 16>> DeviceUuid(int device) {
  static std::mutex mu;
  static std::map<int, std::array<uint8_t, 16>> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(device); it != known.end()) return it->second;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return FailedPrecondition("no CUDA device " + std::to_string(device) + " to name by UUID");
  }
  std::array<uint8_t, 16> uuid{};
  std::memcpy(uuid.data(), prop.uuid.bytes, uuid.size());
  known[device] = uuid;
  return uuid;
}

}  // namespace ferry::cuda
