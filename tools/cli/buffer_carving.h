// BufferCarving: where one rank's buffers of one side of a refit lie inside a single allocation,
// each at a 256-byte aligned offset, in the order of the layout's buffer list. HostBuffers and
// DeviceBuffers carve their one block with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/layout/buffer_list.h"

namespace ferry::cli {

struct BufferCarving {
  std::vector<int64_t> offsets;  // per buffer of the list: its offset in the block, -1 off this rank
  std::vector<int64_t> bytes;    // per buffer: its size on this rank, 0 off this rank
  int64_t block_bytes = 0;       // the block that holds them all
  int64_t total = 0;             // sum of the buffers' sizes

  static BufferCarving Of(const BufferList& specs, int rank) {
    BufferCarving c;
    c.offsets.assign(specs.size(), -1);
    c.bytes.assign(specs.size(), 0);
    for (size_t b = 0; b < specs.size(); ++b) {
      if (specs[b].rank != rank) continue;
      c.offsets[b] = c.block_bytes;
      c.bytes[b] = specs[b].bytes;
      c.block_bytes += (std::max<int64_t>(specs[b].bytes, 1) + 255) / 256 * 256;
      c.total += specs[b].bytes;
    }
    return c;
  }
};

}  // namespace ferry::cli
