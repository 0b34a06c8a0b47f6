// CheckMemory: see memory_check.h.
#include "core/refit/memory_check.h"

#include "core/cuda/pointer.h"
#include "core/cuda/vmm.h"

namespace ferry {
namespace {

Status CheckDeviceMemory(const std::string& what, const MemoryDesc& memory) {
  if (memory.device < 0) {
    return InvalidArgument(what + ": CUDA memory needs a device ordinal, got " +
                           std::to_string(memory.device));
  }
  Result<cuda::DevicePointer> pointer = cuda::DescribeDevicePointer(memory.base);
  if (!pointer.ok()) return pointer.status().WithContext(what);
  if (pointer->device != memory.device) {
    return InvalidArgument(what + ": the memory is on CUDA device " + std::to_string(pointer->device) +
                           ", not on device " + std::to_string(memory.device) + " as registered");
  }
  if (pointer->bytes_from_pointer < memory.bytes) {
    // VMM memory (PyTorch's expandable segments) may span several mappings; a peer maps them all.
    Result<bool> vmm = cuda::IsVmmMemory(memory.base);
    if (vmm.ok() && *vmm) {
      FERRY_ASSIGN_OR_RETURN(int64_t mapped, cuda::VmmBytesFrom(memory.base, memory.bytes));
      if (mapped >= memory.bytes) return Status::Ok();
      return InvalidArgument(what + ": " + std::to_string(memory.bytes) + " bytes registered but only " +
                             std::to_string(mapped) + " are mapped from that address");
    }
    return InvalidArgument(what + ": " + std::to_string(memory.bytes) + " bytes registered but only " +
                           std::to_string(pointer->bytes_from_pointer) +
                           " remain in the device allocation from that address");
  }
  return Status::Ok();
}

}  // namespace

Result<int> CudaDeviceOf(const void* address) {
  FERRY_ASSIGN_OR_RETURN(cuda::DevicePointer pointer, cuda::DescribeDevicePointer(address));
  return pointer.device;
}

Status CheckMemory(const std::string& what, const MemoryDesc& memory, int64_t needed) {
  if (memory.base == nullptr) return InvalidArgument(what + ": no memory (null base)");
  if (memory.bytes < needed) {
    return InvalidArgument(what + " needs " + std::to_string(needed) + " bytes; the memory given has " +
                           std::to_string(memory.bytes));
  }
  if (memory.kind == MemoryKind::kCuda) return CheckDeviceMemory(what, memory);
  return Status::Ok();
}

}  // namespace ferry
