// Plan validation: checks a TransferPlan against the source and destination layouts it was made
// from, before anything moves. The checks (first failure wins, in this order):
//   * ranks of ops, peers, buffers and slots lie in [0, num_ranks);
//   * every region lies inside its buffer or slot, and that buffer or slot is on the op's rank;
//   * copy pairs move the same number of elements (and, except Convert, the same element size);
//   * message ids are non-negative, and every Recv is matched by exactly one Send/Forward with
//     the same message id, swapped rank/peer and equal byte count, and every Send/Forward by
//     exactly one Recv;
//   * a Forward relays the bytes of a Recv it depends on, where that Recv landed (same space,
//     buffer, offset and size);
//   * deps name earlier-or-later ops of the same rank, and the whole graph (deps plus
//     Send->Recv edges) is acyclic;
//   * every byte of every destination fragment is written exactly once, and no other destination
//     byte is written at all.
// Byte coverage is checked on contiguous runs (regions are collapsed to their longest contiguous
// runs first), so the cost grows with the number of runs, not the number of bytes.
#pragma once

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

Status ValidatePlan(const TransferPlan& plan, const Layout& source, const Layout& destination);

// One contiguous byte run [offset, offset + length) of a buffer.
struct ByteRun {
  int64_t offset = 0;
  int64_t length = 0;
};

// Appends the contiguous byte runs a region occupies, in increasing element order, merging
// adjacent runs. Exposed for the plan statistics and tests.
void AppendRegionRuns(const Region& region, std::vector<ByteRun>& runs);

}  // namespace ferry
