// GpuReadTables: the device-resident kernel work of a plan's recurring GPU copies, kept across
// runs of the plan: the executor keeps one for GPU direct reads and one for Copy, Pack and Unpack
// ops on CUDA memory.
//
// A refit runs one plan every step, and each of those copies moves the same regions between the
// same addresses each time (peer allocations stay mapped, buffers and staging stay registered).
// Describing them for the kernel again every run — a descriptor of ~230 bytes per region, built
// on the host and moved through pageable memory — costs more than moving their bytes: a
// Qwen3-30B-A3B refit has ~19,000 regions per rank. The cache keeps each piece of work's uploaded
// tables (core/cuda/copy_stream.h WorkTables) keyed by the plan (its DirectReadCache generation),
// the work's index (direct read or op) and the exact addresses of every region, so a table is
// reused only where building it again would produce the same bytes.
//
// Thread-safety: one thread at a time (the executor's). Tables are launched on, and must be
// freed before, the CopyStream that uploaded them: Clear() before replacing that stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/cuda/copy_stream.h"
#include "core/runtime/copy_pool.h"

namespace ferry {

class GpuReadTables {
 public:
  // Builds a piece of work's kernel descriptors: appends its copies and conversions to the two
  // vectors.
  using Describe = std::function<Status(std::vector<cuda::StridedCopy>&,
                                        std::vector<cuda::StridedConvert>&)>;
  // Plans (generations) whose tables are kept; older ones are freed.
  static constexpr size_t kGenerations = 4;

  // The tables of work `read` (a direct read's or an op's index) of plan `generation` whose
  // regions lie between `ends`: the cached ones when `ends` equal those they were built for,
  // else built with `describe`, uploaded on `gpu` and cached in place of the old ones. Valid
  // until the next call.
  Result<const cuda::WorkTables*> Find(uint64_t generation, int read,
                                       std::span<const CopyEnds> ends, const Describe& describe,
                                       cuda::CopyStream& gpu);
  // Frees every table (ordered after the work already enqueued on their stream).
  void Clear() { generations_.clear(); }
  int64_t uploads() const { return uploads_; }  // tables built so far, for tests

 private:
  struct Read {
    std::vector<const char*> addresses;  // from, to of every region, in order
    std::unique_ptr<cuda::WorkTables> tables;
  };
  struct Generation {
    uint64_t id;
    std::vector<Read> reads;  // by direct read index
  };
  Generation& GenerationOf(uint64_t id);

  std::vector<Generation> generations_;  // most recent first
  int64_t uploads_ = 0;
};

}  // namespace ferry
