// Block-scaled fp8 destinations (Layout::block_scaled, vLLM's quant=fp8_block): the planner
// delivers the source's values of each destination matrix into a staging slot on the destination
// rank, in the source's dtype, and a Quantize op (core/plan/plan.h) then writes the matrix as
// e4m3fn with its 128x128 block scales (core/base/fp8_block.h). Blocks are in the destination
// rank's matrix coordinates, so a block may gather pieces of several source fragments, ranks and
// tensors (a merged qkv or gate_up partition).
//
// Two steps around the ordinary planner passes:
//   PrepareBlockQuantize  the destination layout with each block-scaled buffer's matrices
//                         replaced by "twin" buffers (one per matrix, appended after the layout's
//                         buffers) of the source's dtype, the fragments moved into them (split per
//                         matrix where a stacked fragment spans several) and the tensors' fp8
//                         StoredTransforms dropped: plain copies, planned as any other.
//   FinishBlockQuantize   the plan's twin regions become staging slots (one per matrix: memory
//                         is held from the first delivery into a matrix to its Quantize), the
//                         destination buffer table the layout's again, and one Quantize op per
//                         matrix after every op of its rank that touches the slot.
// A layout without block_scaled buffers is planned as before: Prepare returns no twins and the
// plan is untouched (byte-identical).
//
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

// One matrix of a block-scaled buffer and its twin in the planning layout.
struct QuantizeTwin {
  int rank = 0;
  int buffer = 0;      // the fp8 buffer (destination layout index)
  int scales = 0;      // its scale buffer
  int64_t matrix = 0;  // which matrix of the buffer
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kBF16;  // the twin's: its source tensors' dtype
  int twin = 0;                // the twin buffer's index in BlockQuantizeLayout::destination
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32;  // the buffer's (BlockScaledBuffer)
};

struct BlockQuantizeLayout {
  Layout destination;              // the planning layout; unused when `twins` is empty
  std::vector<QuantizeTwin> twins;
  size_t original_buffers = 0;     // the destination layout's buffer count
};

// Twins for every matrix of `destination`'s block-scaled buffers. InvalidArgument when a
// block-scaled buffer holds a tensor the source lacks or holds in a dtype other than bf16, fp16 or
// fp32 (or two such dtypes), a tensor without its fp8 StoredTransform, or when its fragments do
// not cover its matrices exactly.
Result<BlockQuantizeLayout> PrepareBlockQuantize(const Layout& source, const Layout& destination);

// Rewrites `plan` (planned on prepared.destination) to the destination layout's buffers and adds
// the Quantize ops. `destination` is the layout given to PrepareBlockQuantize.
void FinishBlockQuantize(const BlockQuantizeLayout& prepared, const Layout& destination,
                         TransferPlan& plan);

}  // namespace ferry
