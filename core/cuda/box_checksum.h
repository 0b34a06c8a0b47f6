// Checksums of strided boxes in CUDA memory: `ferry run --verify` checks a CUDA refit's destination
// fragments on the GPU, where they are, and copies 8 bytes per fragment to the host instead of the
// model. A box is described by the batched copy's own descriptor (StridedCopy): its source side,
// `src` with `shape`, `src_strides` and `elem_size`, is what is summed; `dst` and `dst_strides` are
// ignored. The checksum of a box is defined in core/base/checksum_term.h (the wrapping sum of one
// term per element, in row-major order of the box).
//
// Plain C++ header (no CUDA types). Thread-safety: functions may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

// The checksums of every box of `boxes` (device pointers), in order, computed by one kernel launch
// on `stream` (a cudaStream_t, nullptr = default stream). Blocks until the sums are on the host.
// Elements must be 1, 2, 4 or 8 bytes; InvalidArgument names the first box that is not valid.
Result<std::vector<uint64_t>> BoxChecksums(const std::vector<StridedCopy>& boxes, void* stream);

// The checksum of one box whose `src` points at host memory: the CPU reference of BoxChecksums,
// and the checksum of host-resident fragments. `box` must be valid (see BoxChecksums).
uint64_t HostBoxChecksum(const StridedCopy& box);

}  // namespace ferry::cuda
