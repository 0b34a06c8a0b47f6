// CudaExports and PeerCudaMappings: see peer_cuda_memory.h.
#include "core/runtime/peer_cuda_memory.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/cuda/copy_stream.h"
#include "core/cuda/ipc.h"

namespace ferry {
namespace {

// Export numbers of this process: never reused, so a receiver never takes a new export for an
// old one whose table happened to sit at the same address.
std::atomic<uint64_t> next_vmm_export{1};

// The chunk table of a VMM record, copied out of the owner's memory and checked: the chunks tile
// [0, span_bytes) in order.
Result<std::vector<cuda::VmmChunk>> ReadChunkTable(const PeerOwner& owner, const VmmRecord& record,
                                                   int64_t span_bytes) {
  if (record.chunks < 1 || record.chunks > cuda::kMaxVmmChunks) {
    return InvalidArgument("a VMM offer of " + std::to_string(record.chunks) + " chunks (1 to " +
                           std::to_string(cuda::kMaxVmmChunks) + " allowed)");
  }
  std::vector<cuda::VmmChunk> chunks(static_cast<size_t>(record.chunks));
  const size_t bytes = chunks.size() * sizeof(cuda::VmmChunk);
  iovec local{chunks.data(), bytes};
  iovec remote{reinterpret_cast<void*>(record.table), bytes};
  const ssize_t got = ::process_vm_readv(static_cast<pid_t>(owner.pid), &local, 1, &remote, 1, 0);
  if (got != static_cast<ssize_t>(bytes)) {
    return Unavailable("reading process " + std::to_string(owner.pid) + "'s VMM chunk table: " +
                       (got < 0 ? std::strerror(errno) : "short read") +
                       " (reading a peer's memory needs ptrace access to it)");
  }
  int64_t next = 0;
  for (const cuda::VmmChunk& c : chunks) {
    if (c.offset != next || c.bytes <= 0 || c.bytes > span_bytes - next || c.fd < 0) {
      return InvalidArgument("process " + std::to_string(owner.pid) + "'s VMM chunk table does not tile its " +
                             std::to_string(span_bytes) + "-byte span");
    }
    next += c.bytes;
  }
  if (next != span_bytes) {
    return InvalidArgument("process " + std::to_string(owner.pid) + "'s VMM chunks cover " + std::to_string(next) +
                           " of its " + std::to_string(span_bytes) + "-byte span");
  }
  return chunks;
}

// Every VMM export and import holds one fd per mapping: raises the soft limit on open files to
// the hard limit, once.
void RaiseOpenFileLimit() {
  static const bool raised = [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
    limit.rlim_cur = limit.rlim_max;
    return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
  }();
  (void)raised;
}

// A VMM buffer described for peers as lying in `span`, exported as `export_id`.
PeerBuffer VmmBuffer(const MemoryDesc& memory, const cuda::VmmSpan& span, uint64_t export_id) {
  PeerBuffer buffer;
  buffer.address = reinterpret_cast<uint64_t>(memory.base);
  buffer.bytes = memory.bytes;
  buffer.kind = MemoryKind::kCuda;
  buffer.device = memory.device;
  buffer.cuda_vmm = true;
  buffer.allocation_bytes = span.bytes;
  buffer.shared_offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(memory.base) - span.base);
  PutVmmRecord({export_id, reinterpret_cast<uint64_t>(span.chunks.data()), static_cast<int64_t>(span.chunks.size())},
               buffer.ipc_handle);
  return buffer;
}

}  // namespace

std::vector<AddressRange> JoinTouchingRanges(std::vector<AddressRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<AddressRange> joined;
  for (const AddressRange& r : ranges) {
    if (!joined.empty() && r.first <= joined.back().second) {
      joined.back().second = std::max(joined.back().second, r.second);
    } else {
      joined.push_back(r);
    }
  }
  return joined;
}

void PutVmmRecord(const VmmRecord& record, std::array<uint8_t, kCudaIpcHandleBytes>& handle) {
  handle.fill(0);
  std::memcpy(handle.data(), &record.export_id, 8);
  std::memcpy(handle.data() + 8, &record.table, 8);
  std::memcpy(handle.data() + 16, &record.chunks, 8);
}

VmmRecord GetVmmRecord(const std::array<uint8_t, kCudaIpcHandleBytes>& handle) {
  VmmRecord record;
  std::memcpy(&record.export_id, handle.data(), 8);
  std::memcpy(&record.table, handle.data() + 8, 8);
  std::memcpy(&record.chunks, handle.data() + 16, 8);
  return record;
}

Result<PeerBuffer> CudaExports::Describe(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours) {
  auto it = exported_.find({memory.base, memory.bytes});
  if (it != exported_.end()) return it->second;
  FERRY_RETURN_IF_ERROR(cuda::SetDevice(memory.device));
  FERRY_ASSIGN_OR_RETURN(bool vmm, cuda::IsVmmMemory(memory.base));
  if (vmm) return DescribeVmm(memory, neighbours);
  FERRY_ASSIGN_OR_RETURN(PeerBuffer buffer, DescribeCudaAllocation(memory));
  exported_[{memory.base, memory.bytes}] = buffer;
  return buffer;
}

Result<PeerBuffer> DescribeCudaAllocation(const MemoryDesc& memory) {
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
  return buffer;
}

Result<PeerBuffer> CudaExports::DescribeVmm(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours) {
  RaiseOpenFileLimit();
  if (!grouped_) JoinNeighbours(memory, neighbours);
  const HeldVmm* held = GroupExport(memory);
  if (held == nullptr) {
    FERRY_ASSIGN_OR_RETURN(cuda::VmmSpan span, cuda::ExportVmmSpan(memory.base, memory.bytes));
    auto alone = std::make_unique<HeldVmm>(HeldVmm{std::move(span), next_vmm_export++});
    held = alone.get();
    alone_[{memory.base, memory.bytes}] = std::move(alone);
  }
  PeerBuffer buffer = VmmBuffer(memory, held->span, held->export_id);
  exported_[{memory.base, memory.bytes}] = buffer;
  return buffer;
}

// The mapped ranges of `memory` and of the VMM buffers among `neighbours`, joined; buffers whose
// mappings cannot be found are left to be exported on their own.
void CudaExports::JoinNeighbours(const MemoryDesc& memory, std::span<const MemoryDesc> neighbours) {
  grouped_ = true;
  std::vector<AddressRange> ranges;
  auto add = [&ranges](const MemoryDesc& m) {
    if (m.kind != MemoryKind::kCuda || m.base == nullptr || m.bytes <= 0) return;
    Result<bool> vmm = cuda::IsVmmMemory(m.base);
    if (!vmm.ok() || !*vmm) return;
    Result<AddressRange> range = cuda::VmmMappingsAround(m.base, m.bytes);
    if (range.ok()) ranges.push_back(*range);
  };
  add(memory);
  for (const MemoryDesc& m : neighbours) add(m);
  for (const AddressRange& r : JoinTouchingRanges(std::move(ranges))) groups_[r.first].end = r.second;
}

const CudaExports::HeldVmm* CudaExports::GroupExport(const MemoryDesc& memory) {
  const auto start = reinterpret_cast<uintptr_t>(memory.base);
  auto it = groups_.upper_bound(start);
  if (it == groups_.begin()) return nullptr;
  --it;
  VmmGroup& group = it->second;
  if (start + static_cast<uintptr_t>(memory.bytes) > group.end || group.failed) return nullptr;
  if (group.held == nullptr) {
    Result<cuda::VmmSpan> span =
        cuda::ExportVmmSpan(reinterpret_cast<const void*>(it->first), static_cast<int64_t>(group.end - it->first));
    if (!span.ok()) {
      group.failed = true;
      return nullptr;
    }
    group.held = std::make_unique<HeldVmm>(HeldVmm{std::move(*span), next_vmm_export++});
  }
  return group.held.get();
}

void CudaExports::Clear() {
  for (auto& [start, group] : groups_) {
    if (group.held != nullptr) cuda::CloseVmmSpan(group.held->span);
  }
  for (auto& [key, held] : alone_) cuda::CloseVmmSpan(held->span);
  groups_.clear();
  alone_.clear();
  grouped_ = false;
  exported_.clear();
}

PeerCudaMappings::~PeerCudaMappings() { Clear(); }

Result<const char*> PeerCudaMappings::Map(const PeerOwner& owner, const PeerBuffer& buffer, int device) {
  if (buffer.kind != MemoryKind::kCuda) return InvalidArgument("not a CUDA buffer");
  if (owner.pid == ::getpid()) return reinterpret_cast<const char*>(buffer.address);
  const auto key = std::make_pair(owner.pid, buffer.ipc_handle);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    Opened opened;
    if (buffer.cuda_vmm) {
      FERRY_ASSIGN_OR_RETURN(opened, MapVmm(owner, buffer, device));
    } else {
      FERRY_ASSIGN_OR_RETURN(void* base, cuda::OpenIpcMemory(buffer.ipc_handle, device));
      opened.base = static_cast<char*>(base);
    }
    it = opened_.emplace(key, std::move(opened)).first;
  }
  it->second.used = true;
  return it->second.base + buffer.shared_offset;
}

// Takes each chunk's fd from the owner's verified process, then maps the span.
Result<PeerCudaMappings::Opened> PeerCudaMappings::MapVmm(const PeerOwner& owner, const PeerBuffer& buffer,
                                                          int device) {
  if (owner.pidfd < 0) {
    return FailedPrecondition("process " + std::to_string(owner.pid) +
                              " offers VMM memory, which is opened only from a verified same-node peer");
  }
  RaiseOpenFileLimit();
  FERRY_ASSIGN_OR_RETURN(std::vector<cuda::VmmChunk> chunks,
                         ReadChunkTable(owner, GetVmmRecord(buffer.ipc_handle), buffer.allocation_bytes));
  for (size_t i = 0; i < chunks.size(); ++i) {
    const long fd = ::syscall(SYS_pidfd_getfd, owner.pidfd, chunks[i].fd, 0);
    if (fd < 0) {
      const int err = errno;
      for (size_t j = 0; j < i; ++j) ::close(chunks[j].fd);
      return Unavailable("taking VMM handle fd " + std::to_string(chunks[i].fd) + " from process " +
                         std::to_string(owner.pid) + ": " + std::strerror(err) +
                         (err == EMFILE ? " (the span has " + std::to_string(chunks.size()) +
                                              " mappings; raise the hard limit on open files, ulimit -Hn)"
                                        : std::string(" (pidfd_getfd needs ptrace access to the peer)")));
    }
    chunks[i].fd = static_cast<int32_t>(fd);
  }
  FERRY_ASSIGN_OR_RETURN(void* base, cuda::MapVmmSpan(chunks, buffer.allocation_bytes, device));
  Opened opened;
  opened.base = static_cast<char*>(base);
  opened.vmm_bytes = buffer.allocation_bytes;
  for (cuda::VmmChunk& c : chunks) c.fd = -1;  // closed by MapVmmSpan
  opened.vmm_chunks = std::move(chunks);
  return opened;
}

void PeerCudaMappings::Close(Opened& opened) {
  if (opened.vmm_bytes > 0) {
    (void)cuda::UnmapVmmSpan(opened.base, opened.vmm_chunks, opened.vmm_bytes);
  } else {
    (void)cuda::CloseIpcMemory(opened.base);
  }
}

void PeerCudaMappings::Sweep() {
  for (auto it = opened_.begin(); it != opened_.end();) {
    if (!it->second.used) {
      Close(it->second);
      it = opened_.erase(it);
    } else {
      it->second.used = false;
      ++it;
    }
  }
}

void PeerCudaMappings::Clear() {
  for (auto& [key, o] : opened_) Close(o);
  opened_.clear();
}

}  // namespace ferry
