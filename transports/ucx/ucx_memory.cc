// The memory types of the loaded UCX and the ucx.cuda decision (see ucx_memory.h).
#include "transports/ucx/ucx_memory.h"

#include <cstdio>
#include <cstdlib>
#include <set>

namespace ferry::ucx {

Result<CudaMode> ParseCudaMode(std::string_view text) {
  if (text == "auto") return CudaMode::kAuto;
  if (text == "on") return CudaMode::kOn;
  if (text == "off") return CudaMode::kOff;
  return InvalidArgument("ucx.cuda must be 'auto', 'on' or 'off', got '" + std::string(text) + "'");
}

uint64_t ContextMemoryTypes(ucp_context_h context) {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) != UCS_OK) return 0;
  return attr.memory_types;
}

std::string MemoryTypeNames(uint64_t memory_types) {
  // Named here, not read from libucs's ucs_memory_type_names: an executable referencing that array
  // gets a copy of it sized by the UCX it was linked against (a copy relocation), which a newer
  // libucs, with more memory types, would then read past. Values from ucs/memory/memory_type.h.
  static constexpr const char* kNames[] = {"host", "cuda", "cuda-managed", "rocm", "rocm-managed"};
  constexpr int kNamed = static_cast<int>(sizeof(kNames) / sizeof(kNames[0]));
  std::string names;
  for (int type = 0; type < 64; ++type) {
    if (type == UCS_MEMORY_TYPE_HOST || (memory_types & (uint64_t{1} << type)) == 0) continue;
    const std::string name = type < kNamed ? kNames[type] : "type " + std::to_string(type);
    names += (names.empty() ? "" : ",") + name;
  }
  return names.empty() ? "none" : names;
}

Result<bool> DecideCuda(CudaMode mode, uint64_t memory_types, std::string_view ucx_version) {
  if (mode == CudaMode::kOff) return false;
  const bool supported = (memory_types & (uint64_t{1} << UCS_MEMORY_TYPE_CUDA)) != 0;
  if (supported || mode == CudaMode::kAuto) return supported;
  return FailedPrecondition(
      "ucx.cuda=on, but the loaded UCX " + std::string(ucx_version) +
      " does not support CUDA memory (memory types beyond host: " + MemoryTypeNames(memory_types) +
      "); load a CUDA-enabled UCX (put its lib directory first in LD_LIBRARY_PATH, with its "
      "ucx/ module directory next to it or named by UCX_MODULE_DIR; a CUDA driver must be "
      "present), or use ucx.cuda=auto to stage CUDA data through pinned host memory");
}

std::vector<std::string> ParseResources(std::string_view print_info) {
  std::vector<std::string> resources;
  size_t start = 0;
  while (start < print_info.size()) {
    size_t end = print_info.find('\n', start);
    if (end == std::string_view::npos) end = print_info.size();
    const std::string_view line = print_info.substr(start, end - start);
    start = end + 1;
    if (line.find(" resource ") == std::string_view::npos || line.find(" flags ") == std::string_view::npos) {
      continue;
    }
    const size_t last = line.find_last_of(' ');
    const std::string_view token = line.substr(last + 1);
    if (token.find('/') != std::string_view::npos) resources.emplace_back(token);
  }
  return resources;
}

std::vector<std::string> ContextResources(ucp_context_h context) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  std::vector<std::string> resources = ParseResources(std::string_view(text, size));
  std::free(text);
  return resources;
}

std::vector<std::string> CudaTransports(const std::vector<std::string>& resources) {
  static const std::set<std::string> kCuda = {"cuda_copy", "cuda_ipc", "gdr_copy"};
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& resource : resources) {
    const std::string tl = resource.substr(0, resource.find('/'));
    if (kCuda.count(tl) != 0 && seen.insert(tl).second) out.push_back(tl);
  }
  return out;
}

}  // namespace ferry::ucx
