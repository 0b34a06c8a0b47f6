// Peer reads: process_vm_readv gathers of a peer's strided regions (see peer_read.h).
#include "core/runtime/peer_read.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ferry {
namespace {

constexpr int kMaxIovecs = 1024;             // IOV_MAX: iovecs per process_vm_readv, per side
constexpr int64_t kScratchBytes = 256 << 10;  // per thread, for rows that are not contiguous
constexpr int64_t kMaxGapBytes = 64;          // element strides up to this read the row's span

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// The iovecs of one process_vm_readv call: remote[k] is read into local[k] (same lengths).
class VmReadBatch {
 public:
  explicit VmReadBatch(int64_t pid) : pid_(pid) {}

  // Room for `iovecs` more.
  bool Fits(int iovecs) const { return count_ + iovecs <= kMaxIovecs; }
  void Add(uint64_t remote, char* local, int64_t bytes) {
    if (bytes == 0) return;
    local_[count_] = {local, static_cast<size_t>(bytes)};
    remote_[count_] = {reinterpret_cast<void*>(remote), static_cast<size_t>(bytes)};
    low_ = count_ == 0 ? remote : std::min(low_, remote);
    high_ = count_ == 0 ? remote + bytes : std::max(high_, remote + bytes);
    expected_ += bytes;
    ++count_;
  }
  // Reads everything added (one system call) and empties the batch.
  Status Flush();

 private:
  const int64_t pid_;
  iovec local_[kMaxIovecs];
  iovec remote_[kMaxIovecs];
  int count_ = 0;
  int64_t expected_ = 0;
  uint64_t low_ = 0, high_ = 0;  // the remote addresses the batch spans, for errors
};

Status VmReadBatch::Flush() {
  if (count_ == 0) return Status::Ok();
  const ssize_t got = ::process_vm_readv(static_cast<pid_t>(pid_), local_, static_cast<unsigned long>(count_),
                                         remote_, static_cast<unsigned long>(count_), 0);
  const int error = errno;
  const std::string what = "process_vm_readv from peer process " + std::to_string(pid_) + " of " +
                           std::to_string(expected_) + " bytes in " + std::to_string(count_) +
                           " runs within [" + Hex(low_) + ", " + Hex(high_) + ")";
  count_ = 0;
  const int64_t expected = std::exchange(expected_, 0);
  if (got == expected) return Status::Ok();
  if (got < 0 && (error == EPERM || error == EACCES)) {
    return FailedPrecondition(what + ": " + std::strerror(error) +
                              " (allow ptrace between the ranks, allocate buffers with "
                              "SharedHostMemory, or set executor.direct_intra_node=false)");
  }
  return Unavailable(what + ": " + (got < 0 ? std::string(std::strerror(error))
                                            : "short read of " + std::to_string(got) + " bytes"));
}

// Rows contiguous on both sides, one dtype: each remote row (or the slice's bytes of the single
// row) straight into its destination row.
Status ReadRowsInPlace(VmReadBatch& batch, const CopyGeometry& g, const CopySlice& slice,
                       uint64_t from, char* to) {
  if (slice.row_begin == slice.row_end) {
    batch.Add(from + slice.byte_begin, to + slice.byte_begin, slice.byte_end - slice.byte_begin);
    return batch.Flush();
  }
  const int64_t row_bytes = g.run * DTypeSize(g.from_dtype);
  RowWalker rows(g, slice.row_begin);
  for (int64_t row = slice.row_begin; row < slice.row_end; ++row, rows.Next()) {
    if (!batch.Fits(1)) FERRY_RETURN_IF_ERROR(batch.Flush());
    batch.Add(from + static_cast<uint64_t>(rows.from_offset()), to + rows.to_offset(), row_bytes);
  }
  return batch.Flush();
}

// How the peer's row pieces sit in the scratch.
enum class ScratchLayout {
  kDense,    // the peer's elements are adjacent: one iovec per piece
  kSpan,     // small gaps: the piece's byte span, gaps included, one iovec
  kElement,  // large gaps: one iovec per element, packed densely
};

// Elements [j, j + count) of one row: read into the scratch at `scratch`, bound for `to`.
struct Piece {
  int64_t scratch;
  char* to;
  int64_t count;
};

// Reads the batch, then scatters (converting) its pieces from the scratch into the destination.
Status FlushPieces(VmReadBatch& batch, const CopyGeometry& g, int64_t scratch_inner,
                   const char* scratch, std::vector<Piece>& pieces) {
  FERRY_RETURN_IF_ERROR(batch.Flush());
  CopyGeometry piece = g;
  piece.outer_dims = 0;
  piece.rows = 1;
  piece.from_inner = scratch_inner;
  for (const Piece& p : pieces) {
    piece.run = p.count;
    FERRY_RETURN_IF_ERROR(RunCopySlice(piece, WholeCopy(piece), scratch + p.scratch, p.to));
  }
  pieces.clear();
  return Status::Ok();
}

// Rows that are not contiguous on some side, or a conversion: gather into the scratch, scatter.
Status ReadRowsThroughScratch(VmReadBatch& batch, const CopyGeometry& g, const CopySlice& slice,
                              uint64_t from, char* to) {
  thread_local std::vector<char> scratch(kScratchBytes);
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  const int64_t size = DTypeSize(g.from_dtype);
  const ScratchLayout layout = g.run <= 1 || g.from_inner == size ? ScratchLayout::kDense
                               : g.from_inner > size && g.from_inner <= kMaxGapBytes
                                   ? ScratchLayout::kSpan
                                   : ScratchLayout::kElement;
  const int64_t inner = layout == ScratchLayout::kSpan ? g.from_inner : size;
  const int64_t per_piece = layout == ScratchLayout::kElement
                                ? std::min<int64_t>(kMaxIovecs, kScratchBytes / size)
                                : (kScratchBytes - size) / inner + 1;
  int64_t used = 0;
  RowWalker rows(g, slice.row_begin);
  for (int64_t row = slice.row_begin; row < slice.row_end; ++row, rows.Next()) {
    for (int64_t j = 0; j < g.run; j += per_piece) {
      const int64_t n = std::min(per_piece, g.run - j);
      const int64_t bytes = (n - 1) * inner + size;
      const int iovecs = layout == ScratchLayout::kElement ? static_cast<int>(n) : 1;
      if (used + bytes > kScratchBytes || !batch.Fits(iovecs)) {
        FERRY_RETURN_IF_ERROR(FlushPieces(batch, g, inner, scratch.data(), pieces));
        used = 0;
      }
      const uint64_t remote = from + static_cast<uint64_t>(rows.from_offset() + j * g.from_inner);
      if (layout == ScratchLayout::kElement) {
        for (int64_t e = 0; e < n; ++e) {
          batch.Add(remote + static_cast<uint64_t>(e * g.from_inner), scratch.data() + used + e * size, size);
        }
      } else {
        batch.Add(remote, scratch.data() + used, bytes);
      }
      pieces.push_back({used, to + rows.to_offset() + j * g.to_inner, n});
      used += bytes;
    }
  }
  return FlushPieces(batch, g, inner, scratch.data(), pieces);
}

}  // namespace

Status ReadFromPeer(int64_t pid, const CopyGeometry& g, const CopySlice& slice,
                    uint64_t from_address, char* to) {
  VmReadBatch batch(pid);
  if (g.contiguous_run()) return ReadRowsInPlace(batch, g, slice, from_address, to);
  return ReadRowsThroughScratch(batch, g, slice, from_address, to);
}

}  // namespace ferry
