// The split of a direct read into copied pieces and quantized bands (quantizing_read.h).
#include "core/runtime/quantizing_read.h"

#include <algorithm>

#include "core/base/fp8_block.h"

namespace ferry {
namespace {

constexpr int64_t kBand = kFp8BlockSize;  // rows of a block row

// A copy's bytes as the twin of one Quantize op holds them: [begin, end) of the twin's stack.
struct TwinSpan {
  int quantize = -1;
  QuantizeShape shape;
  int64_t row_bytes = 0;
  int64_t begin = 0, end = 0;
  int64_t pitch = 0;  // source bytes from one twin row to the next
};

// Whether copy `c` (geometry `g`) can be banded, and where it lands in its twin.
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
  span.row_bytes = span.shape.cols * DTypeSize(twin.dtype);
  span.begin = c.to.offset - twin.offset;
  span.end = span.begin + g.bytes();
  if (span.shape.matrices < 1 || span.row_bytes == 0 || span.begin < 0 ||
      span.end > span.shape.matrices * span.shape.rows * span.row_bytes) {
    return false;
  }
  if (g.outer_dims == 0) {  // one contiguous run on both sides
    span.pitch = span.row_bytes;
    return true;
  }
  // Runs of exactly a twin row each, dense in the twin, from the start of a row.
  span.pitch = g.from_stride[0];
  return g.outer_dims == 1 && g.run * size == span.row_bytes && g.to_stride[0] == span.row_bytes &&
         span.begin % span.row_bytes == 0;
}

// Bytes [x, y) of the copy (relative to its start) as a piece: a shortened run, or fewer rows.
void AddPiece(int copy, const CopyGeometry& g, const TwinSpan& span, int64_t x, int64_t y,
              QuantizingSplit& split) {
  if (y <= x) return;
  CopyGeometry piece = g;
  int64_t from_delta = x;
  if (g.outer_dims == 0) {
    piece.run = (y - x) / DTypeSize(g.from_dtype);
  } else {
    piece.extent[0] = (y - x) / span.row_bytes;
    piece.rows = piece.extent[0];
    from_delta = x / span.row_bytes * span.pitch;
  }
  split.pieces.push_back({copy, from_delta, x});
  split.geometries.push_back(piece);
}

// Copy `copy`'s whole-band rows of every matrix it touches as Bands, the rest as Pieces.
void SplitCopy(int copy, const CopyGeometry& g, const TwinSpan& span, QuantizingSplit& split) {
  const int64_t matrix_bytes = span.shape.rows * span.row_bytes;
  const int64_t size = DTypeSize(g.from_dtype);
  const int64_t block_rows = (span.shape.rows + kBand - 1) / kBand;
  int64_t done = span.begin;  // twin bytes up to here are placed
  for (int64_t m = span.begin / matrix_bytes; m * matrix_bytes < span.end; ++m) {
    const int64_t base = m * matrix_bytes;
    const int64_t first_row = (std::max(span.begin, base) - base + span.row_bytes - 1) / span.row_bytes;
    const int64_t last_row = (std::min(span.end, base + matrix_bytes) - base) / span.row_bytes;
    const int64_t lo = (first_row + kBand - 1) / kBand;
    const int64_t hi = last_row == span.shape.rows ? block_rows : last_row / kBand;
    if (lo >= hi) continue;
    const int64_t band_begin = base + lo * kBand * span.row_bytes;
    const int64_t band_end = base + std::min(hi * kBand, span.shape.rows) * span.row_bytes;
    if ((band_begin - span.begin) % size != 0 || (band_end - span.begin) % size != 0) continue;
    AddPiece(copy, g, span, done - span.begin, band_begin - span.begin, split);
    const int64_t rows_in = (band_begin - span.begin) / span.row_bytes;
    const int64_t from_delta = g.outer_dims == 0 ? band_begin - span.begin : rows_in * span.pitch;
    split.bands.push_back({copy, span.quantize, from_delta, span.pitch, {m, lo, hi - lo}});
    split.band_bytes += band_end - band_begin;
    done = band_end;
  }
  AddPiece(copy, g, span, done - span.begin, span.end - span.begin, split);
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
    TwinSpan span;
    if (TwinSpanOf(plan, copies[c], g, quantize_of_slot, span)) {
      SplitCopy(static_cast<int>(c), g, span, split);
    } else {
      split.pieces.push_back({static_cast<int>(c), 0, 0});
      split.geometries.push_back(g);
    }
  }
  if (split.bands.empty()) return {};
  return split;
}

std::vector<BlockRows> UnquantizedBlockRows(const QuantizeShape& shape, std::vector<BlockRows> quantized) {
  std::sort(quantized.begin(), quantized.end(), [](const BlockRows& a, const BlockRows& b) {
    return a.matrix != b.matrix ? a.matrix < b.matrix : a.block_row < b.block_row;
  });
  const int64_t block_rows = (shape.rows + kBand - 1) / kBand;
  std::vector<BlockRows> left;
  size_t next = 0;
  for (int64_t m = 0; m < shape.matrices; ++m) {
    int64_t row = 0;
    for (; next < quantized.size() && quantized[next].matrix == m; ++next) {
      if (quantized[next].block_row > row) left.push_back({m, row, quantized[next].block_row - row});
      row = std::max(row, quantized[next].block_row + quantized[next].block_rows);
    }
    if (row < block_rows) left.push_back({m, row, block_rows - row});
  }
  return left;
}

}  // namespace ferry
