// Quantizing reads: a direct read (core/runtime/direct_read.h) into the staging twin of a
// block-scaled fp8 matrix (planner/block_quantize.h) that quantizes what it can on the way.
//
// Staged, a twin costs its bytes four times: the read copies the peer's bf16 values into the twin,
// the Quantize op reads them back, then writes the fp8 values (half as many bytes). Where a copy of
// the read holds whole 128x128 blocks of a matrix (rows of the matrix, or the same columns of
// consecutive rows, each row one contiguous run of the peer's tensor), the receiver quantizes
// them straight from the peer's memory: one read of the values and the fp8 writes, no twin
// traffic. The read's other bytes (blocks that other copies or messages complete) still go to the
// twin, and the matrix's Quantize op quantizes only the blocks no read quantized
// (cuda::LaunchBlockQuantizeRects).
//
// The split of a read is a pure function of the plan, made once per plan beside FindDirectReads;
// whether a run takes it is the receiver's choice alone (the sender's side of a direct read does
// not change): CUDA memory on both ends and the Quantize op's values and scales on the GPU.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan/plan.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

// A rectangle of whole 128x128 blocks of one matrix of a Quantize op's stack: block rows
// [block_row, block_row + block_rows), block columns [block_col, block_col + block_cols).
struct BlockRect {
  int64_t matrix = 0, block_row = 0, block_rows = 0, block_col = 0, block_cols = 0;
};

// A direct read's copies split into what still goes to its targets and what is quantized.
struct QuantizingSplit {
  // Part of copy `copy` of the read, copied as before: `geometry` from the copy's source address
  // + from_delta to its target address + to_delta (bytes).
  struct Piece {
    int copy = 0;
    int64_t from_delta = 0, to_delta = 0;
  };
  // Blocks `blocks` of Quantize op `quantize`'s stack, read from copy `copy`'s source address +
  // from_delta (their first element), a matrix row every `pitch` bytes.
  struct Rect {
    int copy = 0;
    int quantize = -1;
    int64_t from_delta = 0, pitch = 0;
    BlockRect blocks;
  };
  std::vector<Piece> pieces;
  std::vector<CopyGeometry> geometries;  // per piece
  std::vector<Rect> rects;               // empty: the read does not quantize
  int64_t rect_bytes = 0;                // source bytes the rectangles read

  bool quantizes() const { return !rects.empty(); }
};

// For `rank` (every rank's when negative), the Quantize op reading each of its staging slots (-1
// where none), by slot.
std::vector<int> QuantizeOfSlot(const TransferPlan& plan, int rank);

// The split of a direct read with `copies` (their geometries beside), received by a rank whose
// Quantize op of each staging slot `quantize_of_slot` gives. A copy qualifies when it copies a
// twin's values unchanged (no dtype conversion or element function) and its rows are rows of the
// twin's matrices: one contiguous run on both sides (whole rows in between), or runs of equal
// length, each within a twin row and a twin row apart. Its whole blocks become Rects, the rest
// Pieces. Every other copy is one Piece. No Rects when nothing qualifies.
QuantizingSplit SplitQuantizingRead(const TransferPlan& plan, const std::vector<CopyPair>& copies,
                                    const std::vector<CopyGeometry>& geometries,
                                    const std::vector<int>& quantize_of_slot);

// Elements of `blocks` in a stack of `shape` (its last block row and column may be partial).
int64_t ElementsOf(const BlockRect& blocks, const QuantizeShape& shape);

// The blocks of a stack of `shape` that `quantized` (disjoint, any order) leaves, as rectangles by
// matrix and block row, runs of block columns merged (and equal runs of consecutive block rows):
// what the Quantize op still quantizes from its twin.
std::vector<BlockRect> UnquantizedBlocks(const QuantizeShape& shape, const std::vector<BlockRect>& quantized);

}  // namespace ferry
