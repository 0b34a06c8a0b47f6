// HostBuffers: a rank's buffers of one side in one shareable block.
#include "tools/cli/host_buffers.h"

#include <algorithm>
#include <cstring>

namespace ferry::cli {

HostBuffers::HostBuffers(const BufferList& specs, int rank, const std::string& side) {
  pointers_.assign(specs.size(), nullptr);
  offsets_.assign(specs.size(), -1);
  bytes_.assign(specs.size(), 0);
  int64_t size = 0;
  for (size_t b = 0; b < specs.size(); ++b) {
    if (specs[b].rank != rank) continue;
    offsets_[b] = size;
    bytes_[b] = specs[b].bytes;
    size += (std::max<int64_t>(specs[b].bytes, 1) + 255) / 256 * 256;
    total_ += specs[b].bytes;
  }
  Result<SharedHostMemory> memory = SharedHostMemory::Allocate(size, "ferry-" + side);
  if (!memory.ok()) return;
  block_ = std::move(*memory);
  for (size_t b = 0; b < specs.size(); ++b) {
    if (offsets_[b] >= 0) pointers_[b] = block_.data() + offsets_[b];
  }
  complete_ = true;
}

void HostBuffers::Zero() {
  for (size_t b = 0; b < pointers_.size(); ++b) {
    if (pointers_[b] != nullptr) std::memset(pointers_[b], 0, static_cast<size_t>(bytes_[b]));
  }
}

}  // namespace ferry::cli
