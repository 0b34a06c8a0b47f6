// PeerCudaMappings: see peer_cuda_memory.h.
#include "core/runtime/peer_cuda_memory.h"

#include <unistd.h>

#include "core/cuda/copy_stream.h"
#include "core/cuda/ipc.h"

namespace ferry {

Result<PeerBuffer> CudaExports::Describe(const MemoryDesc& memory) {
  auto it = exported_.find({memory.base, memory.bytes});
  if (it != exported_.end()) return it->second;
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(memory.device));
  FERRY_ASSIGN_OR_RETURN(cuda::IpcExport exported, cuda::ExportIpcMemory(memory.base));
  PeerBuffer buffer;
  buffer.address = reinterpret_cast<uint64_t>(memory.base);
  buffer.bytes = memory.bytes;
  buffer.kind = MemoryKind::kCuda;
  buffer.device = memory.device;
  buffer.shared_offset = exported.offset;
  buffer.allocation_bytes = exported.allocation_bytes;
  buffer.ipc_handle = exported.handle;
  if (exported.offset + memory.bytes > exported.allocation_bytes) {
    return InvalidArgument("CUDA buffer of " + std::to_string(memory.bytes) +
                           " bytes runs past the end of its allocation");
  }
  exported_[{memory.base, memory.bytes}] = buffer;
  return buffer;
}

PeerCudaMappings::~PeerCudaMappings() { Clear(); }

Result<const char*> PeerCudaMappings::Map(int64_t owner_pid, const PeerBuffer& buffer, int device) {
  if (buffer.kind != MemoryKind::kCuda) return InvalidArgument("not a CUDA buffer");
  if (owner_pid == ::getpid()) return reinterpret_cast<const char*>(buffer.address);
  const auto key = std::make_pair(owner_pid, buffer.ipc_handle);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    FERRY_ASSIGN_OR_RETURN(void* base, cuda::OpenIpcMemory(buffer.ipc_handle, device));
    it = opened_.emplace(key, Opened{static_cast<char*>(base), false}).first;
  }
  it->second.used = true;
  return it->second.base + buffer.shared_offset;
}

void PeerCudaMappings::Sweep() {
  for (auto it = opened_.begin(); it != opened_.end();) {
    if (!it->second.used) {
      (void)cuda::CloseIpcMemory(it->second.base);
      it = opened_.erase(it);
    } else {
      it->second.used = false;
      ++it;
    }
  }
}

void PeerCudaMappings::Clear() {
  for (auto& [key, o] : opened_) (void)cuda::CloseIpcMemory(o.base);
  opened_.clear();
}

}  // namespace ferry
