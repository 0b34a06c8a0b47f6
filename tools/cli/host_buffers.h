// HostBuffers: one rank's buffers of one side of a refit (source or destination), 256-byte aligned,
// carved out of one block of shareable memory (a memfd) that same-node peers map once for direct
// reads (core/runtime/peer_memory.h), as a trainer's weights sit in a few large allocator segments
// in a real deployment. Used by `ferry run` and `ferry bench`; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout/buffer_list.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/transport.h"
#include "tools/cli/buffer_carving.h"

namespace ferry::cli {

class HostBuffers {
 public:
  // Allocates every buffer of `specs` that belongs to `rank`; complete() tells whether it worked.
  HostBuffers(const BufferList& specs, int rank, const std::string& side);

  // True when every buffer of this rank got memory.
  bool complete() const { return complete_; }
  // Per buffer of `specs`: its memory on this rank, null for other ranks' buffers.
  const std::vector<char*>& pointers() const { return pointers_; }
  MemoryDesc Desc(size_t buffer) const {
    return block_.Sub(carving_.offsets[buffer], carving_.bytes[buffer]);
  }
  // Zeroes every buffer of this rank (before a verified refit).
  void Zero();
  int64_t total() const { return carving_.total; }

 private:
  BufferCarving carving_;
  SharedHostMemory block_;
  std::vector<char*> pointers_;
  bool complete_ = false;
};

}  // namespace ferry::cli
