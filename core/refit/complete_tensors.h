// Which destination tensors a rank holds whole after a refit that stopped part way (DESIGN's
// refit contract: on failure the caller learns which tensors are complete). A rank's destination
// fragment is written by the rank's ops whose copy pairs, received bytes or scales land on the
// fragment's byte span in its buffer; a tensor is complete on the rank when every op writing any
// of its fragments there completed. Spans are compared as whole byte ranges, so an op writing
// rows interleaved with a fragment's counts as one of its writers: a tensor may be reported
// incomplete that is whole, never the reverse.
//
// Plain values; thread-safe to read once made.
#pragma once

#include <vector>

#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

class DestinationWriters {
 public:
  // For `rank` of `plan`, whose destination layout is `destination`.
  static DestinationWriters For(const TransferPlan& plan, const Layout& destination, int rank);

  // The tensors (indices into destination.tensors, ascending) with fragments on the rank whose
  // writers are all among `completed_ops` (plan op ids). A tensor none of whose bytes an op of
  // the rank writes counts as complete only when every op of the rank completed.
  std::vector<int> Complete(const std::vector<int>& completed_ops) const;
  // The tensors with fragments on the rank (ascending).
  const std::vector<int>& Held() const { return held_; }

 private:
  std::vector<int> held_;
  std::vector<std::vector<int>> writers_;  // by position in held_: op ids, ascending
  int num_rank_ops_ = 0;
};

}  // namespace ferry
