// The split of a direct read into copied pieces and quantized block rectangles
// (quantizing_read.h).
#include "core/runtime/quantizing_read.h"

#include <algorithm>

#include "core/base/fp8_block.h"

namespace ferry {
namespace {

constexpr int64_t kBlock = kFp8BlockSize;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where a copy lands in the twin of one Quantize op, and how its source rows lie.
struct TwinSpan {
  int quantize = -1;
  QuantizeShape shape;
  int64_t elem = 0;       // the twin's element bytes
  int64_t row_bytes = 0;  // of a twin row
  int64_t begin = 0, end = 0;  // twin bytes the copy spans
  // Runs of the copy, one per twin row (false: one contiguous run of whole and partial rows).
  bool per_row = false;
  int64_t first_row = 0, num_rows = 0;  // per_row: twin rows (counted over the stack)
  int64_t col0 = 0, width = 0;          // per_row: the runs' columns
  int64_t pitch = 0;                    // source bytes from one twin row to the next
};

// Whether copy `c` (geometry `g`) copies a twin's values as rows of its matrices, and where.
bool TwinSpanOf(const TransferPlan& plan, const CopyPair& c, const CopyGeometry& g,
                const std::vector<int>& quantize_of_slot, TwinSpan& span) {
  if (c.to.space != Space::kStaging || c.to.buffer < 0 ||
      c.to.buffer >= static_cast<int>(quantize_of_slot.size()) || quantize_of_slot[c.to.buffer] < 0) {
    return false;
  }
  const int64_t size = DTypeSize(g.from_dtype);
  if (g.from_dtype != g.to_dtype || g.fn != ElementFn::kNone || g.rows == 0 ||
      (g.run > 1 && (g.from_inner != size || g.to_inner != size))) {
    return false;
  }
  span.quantize = quantize_of_slot[c.to.buffer];
  const Region twin = plan.Copy(plan.ops[span.quantize].copies_begin).from;
  span.shape = QuantizeShapeOf(twin);
  span.elem = DTypeSize(twin.dtype);
  span.row_bytes = span.shape.cols * span.elem;
  span.begin = c.to.offset - twin.offset;
  span.end = span.begin + g.bytes();
  if (span.shape.matrices < 1 || span.row_bytes == 0 || span.row_bytes % size != 0 ||
      span.begin < 0 || span.begin % size != 0 ||
      span.end > span.shape.matrices * span.shape.rows * span.row_bytes) {
    return false;
  }
  if (g.outer_dims == 0) {
    span.pitch = span.row_bytes;
    return true;
  }
  const int64_t run_bytes = g.run * size, in_row = span.begin % span.row_bytes;
  span.per_row = true;
  span.first_row = span.begin / span.row_bytes;
  span.num_rows = g.extent[0];
  span.col0 = in_row / span.elem;
  span.width = run_bytes / span.elem;
  span.pitch = g.from_stride[0];
  return g.outer_dims == 1 && g.to_stride[0] == span.row_bytes && in_row + run_bytes <= span.row_bytes &&
         in_row % span.elem == 0 && run_bytes % span.elem == 0 && (span.elem * kBlock) % size == 0;
}

// Whole blocks of matrix rows [ra, rb) and columns [ca, cb) of a stack of `shape` (a row or
// column at the matrix's end closes its last, partial block); false when there are none.
bool WholeBlocks(const QuantizeShape& shape, int64_t m, int64_t ra, int64_t rb, int64_t ca, int64_t cb,
                 BlockRect& blocks) {
  const int64_t lo_r = CeilDiv(ra, kBlock), hi_r = rb == shape.rows ? CeilDiv(rb, kBlock) : rb / kBlock;
  const int64_t lo_c = CeilDiv(ca, kBlock), hi_c = cb == shape.cols ? CeilDiv(cb, kBlock) : cb / kBlock;
  blocks = {m, lo_r, hi_r - lo_r, lo_c, hi_c - lo_c};
  return lo_r < hi_r && lo_c < hi_c;
}

// A piece of copy `copy`: `rows` rows (per-row copies) or `bytes` bytes (a contiguous one) from the
// copy's start + the deltas.
void AddPiece(int copy, const CopyGeometry& g, int64_t rows, int64_t bytes, int64_t from_delta,
              int64_t to_delta, QuantizingSplit& split) {
  if (rows <= 0 || bytes <= 0) return;
  CopyGeometry piece = g;
  piece.run = bytes / DTypeSize(g.from_dtype);
  if (g.outer_dims > 0) {
    piece.extent[0] = rows;
    piece.rows = rows;
  }
  split.pieces.push_back({copy, from_delta, to_delta});
  split.geometries.push_back(piece);
}

// A contiguous copy: the whole blocks of its whole rows in each matrix it touches as Rects (every
// column), the bytes between them as Pieces.
void SplitContiguous(int copy, const CopyGeometry& g, const TwinSpan& span, QuantizingSplit& split) {
  const int64_t matrix_bytes = span.shape.rows * span.row_bytes;
  int64_t done = span.begin;  // twin bytes up to here are placed
  for (int64_t m = span.begin / matrix_bytes; m * matrix_bytes < span.end; ++m) {
    const int64_t base = m * matrix_bytes;
    const int64_t ra = CeilDiv(std::max(span.begin, base) - base, span.row_bytes);
    const int64_t rb = (std::min(span.end, base + matrix_bytes) - base) / span.row_bytes;
    BlockRect blocks;
    if (ra >= rb || !WholeBlocks(span.shape, m, ra, rb, 0, span.shape.cols, blocks)) continue;
    const int64_t first = base + blocks.block_row * kBlock * span.row_bytes;
    const int64_t last =
        base + std::min((blocks.block_row + blocks.block_rows) * kBlock, span.shape.rows) * span.row_bytes;
    AddPiece(copy, g, 1, first - done, done - span.begin, done - span.begin, split);
    split.rects.push_back({copy, span.quantize, first - span.begin, span.row_bytes, blocks});
    split.rect_bytes += last - first;
    done = last;
  }
  AddPiece(copy, g, 1, span.end - done, done - span.begin, done - span.begin, split);
}

// A per-row copy: in each matrix it touches, the whole blocks of its rows and columns as a Rect,
// the rows before and after them and the columns beside them as Pieces.
void SplitPerRow(int copy, const CopyGeometry& g, const TwinSpan& span, QuantizingSplit& split) {
  auto piece = [&](int64_t row, int64_t rows, int64_t col, int64_t cols) {  // relative to the copy
    AddPiece(copy, g, rows, cols * span.elem, row * span.pitch + col * span.elem,
             row * span.row_bytes + col * span.elem, split);
  };
  int64_t done = 0;  // copy rows up to here are placed
  const int64_t end_row = span.first_row + span.num_rows;
  for (int64_t m = span.first_row / span.shape.rows; m * span.shape.rows < end_row; ++m) {
    const int64_t base = m * span.shape.rows;
    const int64_t ra = std::max(span.first_row, base) - base, rb = std::min(end_row, base + span.shape.rows) - base;
    BlockRect blocks;
    if (!WholeBlocks(span.shape, m, ra, rb, span.col0, span.col0 + span.width, blocks)) continue;
    const int64_t r0 = base + blocks.block_row * kBlock - span.first_row;
    const int64_t r1 = base + std::min((blocks.block_row + blocks.block_rows) * kBlock, span.shape.rows) -
                       span.first_row;
    const int64_t c0 = blocks.block_col * kBlock - span.col0;
    const int64_t c1 = std::min((blocks.block_col + blocks.block_cols) * kBlock, span.shape.cols) - span.col0;
    piece(done, r0 - done, 0, span.width);
    piece(r0, r1 - r0, 0, c0);
    piece(r0, r1 - r0, c1, span.width - c1);
    split.rects.push_back({copy, span.quantize, r0 * span.pitch + c0 * span.elem, span.pitch, blocks});
    split.rect_bytes += (r1 - r0) * (c1 - c0) * span.elem;
    done = r1;
  }
  piece(done, span.num_rows - done, 0, span.width);
}

}  // namespace

std::vector<int> QuantizeOfSlot(const TransferPlan& plan, int rank) {
  std::vector<int> of_slot(plan.slots.size(), -1);
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::kQuantize || (rank >= 0 && op.rank != rank) || op.NumCopies() != 1) continue;
    const Region from = plan.Copy(op.copies_begin).from;
    if (from.space == Space::kStaging && from.buffer >= 0 &&
        from.buffer < static_cast<int>(of_slot.size()) && from.IsContiguous()) {
      of_slot[from.buffer] = op.id;
    }
  }
  return of_slot;
}

QuantizingSplit SplitQuantizingRead(const TransferPlan& plan, const std::vector<CopyPair>& copies,
                                    const std::vector<CopyGeometry>& geometries,
                                    const std::vector<int>& quantize_of_slot) {
  QuantizingSplit split;
  for (size_t c = 0; c < copies.size() && c < geometries.size(); ++c) {
    const CopyGeometry& g = geometries[c];
    const int copy = static_cast<int>(c);
    TwinSpan span;
    if (!TwinSpanOf(plan, copies[c], g, quantize_of_slot, span)) {
      split.pieces.push_back({copy, 0, 0});
      split.geometries.push_back(g);
    } else if (span.per_row) {
      SplitPerRow(copy, g, span, split);
    } else {
      SplitContiguous(copy, g, span, split);
    }
  }
  if (split.rects.empty()) return {};
  return split;
}

int64_t ElementsOf(const BlockRect& blocks, const QuantizeShape& shape) {
  const int64_t row = blocks.block_row * kBlock, col = blocks.block_col * kBlock;
  return (std::min(shape.rows, row + blocks.block_rows * kBlock) - row) *
         (std::min(shape.cols, col + blocks.block_cols * kBlock) - col);
}

std::vector<BlockRect> UnquantizedBlocks(const QuantizeShape& shape, const std::vector<BlockRect>& quantized) {
  const int64_t block_rows = CeilDiv(shape.rows, kBlock), block_cols = CeilDiv(shape.cols, kBlock);
  std::vector<char> done(static_cast<size_t>(shape.matrices * block_rows * block_cols), 0);
  for (const BlockRect& q : quantized) {
    if (q.matrix < 0 || q.matrix >= shape.matrices) continue;
    for (int64_t r = q.block_row; r < std::min(block_rows, q.block_row + q.block_rows); ++r) {
      const int64_t row = (q.matrix * block_rows + r) * block_cols;
      std::fill(done.begin() + row + q.block_col, done.begin() + row + std::min(block_cols, q.block_col + q.block_cols), 1);
    }
  }
  std::vector<BlockRect> left;
  for (int64_t m = 0; m < shape.matrices; ++m) {
    const size_t first_of_matrix = left.size();
    for (int64_t r = 0; r < block_rows; ++r) {
      const char* row = done.data() + (m * block_rows + r) * block_cols;
      for (int64_t c = 0; c < block_cols;) {
        if (row[c]) {
          ++c;
          continue;
        }
        int64_t end = c;
        while (end < block_cols && !row[end]) ++end;
        // The same columns as a rectangle ending in the row above: it grows by this row.
        auto above = std::find_if(left.begin() + static_cast<std::ptrdiff_t>(first_of_matrix), left.end(),
                                  [&](const BlockRect& b) {
                                    return b.block_row + b.block_rows == r && b.block_col == c && b.block_cols == end - c;
                                  });
        if (above != left.end()) {
          ++above->block_rows;
        } else {
          left.push_back({m, r, 1, c, end - c});
        }
        c = end;
      }
    }
  }
  return left;
}

}  // namespace ferry
