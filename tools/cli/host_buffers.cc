// HostBuffers: a rank's buffers of one side in one shareable block.
#include "tools/cli/host_buffers.h"

#include <cstring>

namespace ferry::cli {

HostBuffers::HostBuffers(const BufferList& specs, int rank, const std::string& side)
    : carving_(BufferCarving::Of(specs, rank)) {
  pointers_.assign(specs.size(), nullptr);
  Result<SharedHostMemory> memory = SharedHostMemory::Allocate(carving_.block_bytes, "ferry-" + side);
  if (!memory.ok()) return;
  block_ = std::move(*memory);
  for (size_t b = 0; b < specs.size(); ++b) {
    if (carving_.offsets[b] >= 0) pointers_[b] = block_.data() + carving_.offsets[b];
  }
  complete_ = true;
}

void HostBuffers::Zero() {
  for (size_t b = 0; b < pointers_.size(); ++b) {
    if (pointers_[b] != nullptr) std::memset(pointers_[b], 0, static_cast<size_t>(carving_.bytes[b]));
  }
}

}  // namespace ferry::cli
