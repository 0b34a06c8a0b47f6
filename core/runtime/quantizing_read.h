// Quantizing reads: a direct read (core/runtime/direct_read.h) into the staging twin of a
// block-scaled fp8 matrix (planner/block_quantize.h) that quantizes what it can on the way.
//
// Staged, a twin costs its bytes four times: the read copies the peer's bf16 values into the twin,
// the Quantize op reads them back, then writes the fp8 values (half as many bytes). Where a copy of
// the read holds whole 128-row bands of a matrix, every block of those rows lies inside the copy,
// so the receiver can quantize them straight from the peer's memory: one read of the values and
// the fp8 writes, no twin traffic. The read's other bytes (rows of bands that other copies or
// messages complete) still go to the twin, and the matrix's Quantize op quantizes only the block
// rows no read quantized (cuda::LaunchBlockQuantizeBands).
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

// Block rows of one matrix of a Quantize op's stack.
struct BlockRows {
  int64_t matrix = 0, block_row = 0, block_rows = 0;
};

// A direct read's copies split into what still goes to its targets and what is quantized.
struct QuantizingSplit {
  // Part of copy `copy` of the read, copied as before: `geometry` from the copy's source address
  // + from_delta to its target address + to_delta (bytes).
  struct Piece {
    int copy = 0;
    int64_t from_delta = 0, to_delta = 0;
  };
  // Whole block rows `rows` of Quantize op `quantize`'s stack, read from copy `copy`'s source
  // address + from_delta, a matrix row every `pitch` bytes.
  struct Band {
    int copy = 0;
    int quantize = -1;
    int64_t from_delta = 0, pitch = 0;
    BlockRows rows;
  };
  std::vector<Piece> pieces;
  std::vector<CopyGeometry> geometries;  // per piece
  std::vector<Band> bands;               // empty: the read does not quantize
  int64_t band_bytes = 0;                // source bytes the bands read

  bool quantizes() const { return !bands.empty(); }
};

// For `rank` (every rank's when negative), the Quantize op reading each of its staging slots (-1
// where none), by slot.
std::vector<int> QuantizeOfSlot(const TransferPlan& plan, int rank);

// The split of a direct read with `copies` (their geometries beside), received by a rank whose
// Quantize op of each staging slot `quantize_of_slot` gives. A copy is banded when it copies a
// twin's values unchanged (no dtype conversion or element function), lands densely in the twin
// and reads its source as rows of a matrix row each (one contiguous run, or runs of exactly a row
// starting at a row); its whole-band rows become Bands, the rest Pieces. Every other copy is one
// Piece. No Bands when nothing qualifies.
QuantizingSplit SplitQuantizingRead(const TransferPlan& plan, const std::vector<CopyPair>& copies,
                                    const std::vector<CopyGeometry>& geometries,
                                    const std::vector<int>& quantize_of_slot);

// The block rows of a stack of `shape` that `quantized` (disjoint, any order; matrices outside
// the stack ignored) leaves, by matrix and row, runs merged: what the Quantize op still quantizes
// from its twin.
std::vector<BlockRows> UnquantizedBlockRows(const QuantizeShape& shape, std::vector<BlockRows> quantized);

}  // namespace ferry
