// TransferPlan: the transport-agnostic DAG the planner emits and the executor runs.
//
// A plan is a list of per-rank ops. Ops on one rank are ordered by their deps (ids of ops on the same
// rank); across ranks, a Send/Forward is matched with the Recv that carries the same `message`.
// Memory is named, never addressed: a Region points into a source-layout buffer, a
// destination-layout buffer, or a staging slot, by index; the executor maps those to real memory
// (host or CUDA) and to transport registrations.
//
//   Copy     rank-local strided copy(s) from source buffers to destination buffers
//   Pack     strided regions of source buffers -> one contiguous staging slot
//   Send     contiguous bytes (a staging slot or a contiguous user region) -> peer
//   Recv     peer -> contiguous bytes (a staging slot or a contiguous destination region)
//   Unpack   one staging slot -> strided regions of destination buffers
//   Convert  like Copy/Pack/Unpack, with a dtype change (from.dtype != to.dtype) and/or an
//            element function (CopyPair::fn, core/base/element_fn.h: the transform of a tensor
//            the destination stores transformed, such as vLLM's Mamba A = -exp(A_log))
//   Forward  relays what a Recv it depends on received (where that Recv landed: a staging slot
//            or a destination region) to the next peer
//   Quantize block-scaled fp8 of one matrix stack (core/base/fp8_block.h): its one copy pair
//            reads the dense values (bf16, fp16 or fp32; [rows, cols] or [matrices, rows, cols])
//            and writes them as e4m3fn into a dense region of the same shape; `data` is where
//            the scales go in a destination buffer (QuantizeScales), in the op's scale_fmt:
//            dense fp32 [matrices, ceil(rows/128), ceil(cols/128)], or DeepGEMM's SM100 packed
//            codes (core/base/fp8_scale_format.h)
//
// Storage is flat: an op's deps and copy pairs are ranges of plan-wide lists (read them with
// Deps(op) and Copies(op)), so a plan of a million ops is a handful of allocations rather than two
// per op. Copy pairs are stored packed (PackedCopy: 32 bytes of buffers and offsets, plus a shared
// geometry record of spaces, dtypes, element function, shapes and strides) and unpacked into CopyPair values when
// read; a pair takes ~32 bytes instead of ~300.
//
// Plans are plain values; building one is single-threaded, reading one is thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/element_fn.h"
#include "core/base/fp8_scale_format.h"
#include "core/base/status.h"
#include "core/layout/box.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"

namespace ferry {

enum class OpKind : uint8_t { kCopy, kPack, kSend, kRecv, kUnpack, kConvert, kForward, kQuantize };
std::string_view OpKindName(OpKind kind);  // "copy", "pack", ...
// Send or Forward: the sending end of a message.
inline bool IsSenderKind(OpKind kind) { return kind == OpKind::kSend || kind == OpKind::kForward; }
// Send, Forward or Recv: an op that moves a message between ranks (Op::peer, message, data).
inline bool IsMessageKind(OpKind kind) { return IsSenderKind(kind) || kind == OpKind::kRecv; }

enum class Space : uint8_t {
  kSource,       // Region::buffer indexes TransferPlan::source_buffers
  kDestination,  // Region::buffer indexes TransferPlan::destination_buffers
  kStaging,      // Region::buffer indexes TransferPlan::slots
};
std::string_view SpaceName(Space space);

// A strided block of elements inside one buffer: element i (0 <= i[d] < shape[d]) lives at byte
//   offset + sum_d i[d] * strides[d] * DTypeSize(dtype).
struct Region {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;  // bytes
  DType dtype = DType::kUInt8;
  int ndim = 1;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // elements

  int64_t NumElements() const;
  int64_t NumBytes() const { return NumElements() * DTypeSize(dtype); }
  // Bytes from the first element to just past the last one (0 when empty): [offset, offset +
  // SpanBytes()) holds every element, and the gaps between them when strided.
  int64_t SpanBytes() const;
  // True when the elements occupy [offset, offset + NumBytes()) densely in row-major order.
  bool IsContiguous() const;
  // A contiguous 1-D byte region.
  static Region Bytes(Space space, int buffer, int64_t offset, int64_t bytes);
};

// Contiguous bytes [offset, offset + bytes) of one buffer: what a Send/Forward sends and where a
// Recv lands. Converts to the equivalent 1-D uint8 Region.
struct ByteRange {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;
  int64_t bytes = 0;

  ByteRange() = default;
  ByteRange(Space space_in, int buffer_in, int64_t offset_in, int64_t bytes_in)
      : space(space_in), buffer(buffer_in), offset(offset_in), bytes(bytes_in) {}
  int64_t NumBytes() const { return bytes; }
  operator Region() const { return Region::Bytes(space, buffer, offset, bytes); }  // NOLINT
};

struct CopyPair {
  Region from;
  Region to;  // same shape (element count per dim) as `from`
  // Applied to each element on the way (Convert ops only); kNone copies or converts the value.
  ElementFn fn = ElementFn::kNone;
};

// A CopyPair as TransferPlan stores it: per pair only where each side starts (buffer and byte
// offset). The rest, the pair's *geometry* (spaces, dtypes, element function, ndims, shapes,
// strides), is a record in
// TransferPlan::copy_dims at `geometry`, which every pair of the same geometry shares (a refit's
// million pairs have a few thousand geometries). A record is a header word (PairGeometry::Header)
// then from's shape (from_ndim values), to's shape unless kSharedShape, from's strides unless
// kFromDense, to's strides unless kToDense. A dense side has the row-major strides of its shape
// (stride[d] = product over e > d of max(1, shape[e])). Arrays have max(0, min(ndim, kMaxDims))
// values.
struct PackedCopy {
  int64_t from_offset = 0;
  int64_t to_offset = 0;
  int64_t geometry = 0;  // index of the geometry record in TransferPlan::copy_dims
  int from_buffer = 0;
  int to_buffer = 0;
};

// The header word of a geometry record: spaces, dtypes, ndims, flags and the element function in
// one int64 (kNone, 0, in the top byte: the header of a pair without one is what it was before
// element functions existed). An ndim outside [0, kMaxDims] is kept as -1 or kMaxDims + 1
// (invalid, for the validator to report).
struct PairGeometry {
  static constexpr uint8_t kSharedShape = 1, kFromDense = 2, kToDense = 4;
  Space from_space = Space::kStaging;
  Space to_space = Space::kStaging;
  DType from_dtype = DType::kUInt8;
  DType to_dtype = DType::kUInt8;
  int8_t from_ndim = 0;
  int8_t to_ndim = 0;
  uint8_t flags = 0;
  ElementFn fn = ElementFn::kNone;

  int64_t Header() const {
    return static_cast<int64_t>(static_cast<uint64_t>(from_space) |
                                static_cast<uint64_t>(to_space) << 8 |
                                static_cast<uint64_t>(from_dtype) << 16 |
                                static_cast<uint64_t>(to_dtype) << 24 |
                                static_cast<uint64_t>(static_cast<uint8_t>(from_ndim)) << 32 |
                                static_cast<uint64_t>(static_cast<uint8_t>(to_ndim)) << 40 |
                                static_cast<uint64_t>(flags) << 48 |
                                static_cast<uint64_t>(fn) << 56);
  }
  static PairGeometry FromHeader(int64_t header) {
    const uint64_t h = static_cast<uint64_t>(header);
    PairGeometry g;
    g.from_space = static_cast<Space>(h & 0xff);
    g.to_space = static_cast<Space>(h >> 8 & 0xff);
    g.from_dtype = static_cast<DType>(h >> 16 & 0xff);
    g.to_dtype = static_cast<DType>(h >> 24 & 0xff);
    g.from_ndim = static_cast<int8_t>(h >> 32 & 0xff);
    g.to_ndim = static_cast<int8_t>(h >> 40 & 0xff);
    g.flags = static_cast<uint8_t>(h >> 48 & 0xff);
    g.fn = static_cast<ElementFn>(h >> 56 & 0xff);
    return g;
  }
};

// One side of a copy pair for the fast TransferPlan::AppendCopy: where its first element is, its
// dtype, and its element strides (null for a dense row-major side; not owned, read during the call).
struct CopyEnd {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;
  DType dtype = DType::kUInt8;
  const int64_t* strides = nullptr;
};

class TransferPlan;

// The copy pairs of one op, unpacked on the fly: `for (const CopyPair& c : plan.Copies(op))`.
class CopyRange {
 public:
  class Iterator {
   public:
    using value_type = CopyPair;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(const TransferPlan* plan, int index) : plan_(plan), index_(index) {}
    CopyPair operator*() const;
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++index_;
      return old;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.index_ == b.index_; }

   private:
    const TransferPlan* plan_ = nullptr;
    int index_ = 0;
  };
  CopyRange(const TransferPlan* plan, int begin, int end) : plan_(plan), begin_(begin), end_(end) {}
  Iterator begin() const { return {plan_, begin_}; }
  Iterator end() const { return {plan_, end_}; }
  int size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  CopyPair operator[](int i) const;

 private:
  const TransferPlan* plan_;
  int begin_, end_;
};

// A contiguous scratch buffer on one rank, used by Pack/Send/Recv/Forward/Unpack. The executor
// allocates it when the first op using it starts and frees it after the last one finishes.
struct StagingSlot {
  int rank = 0;
  int64_t bytes = 0;
};

// A plan's buffer table: the rank and size of each of a layout's buffers, by index (names stay in
// the layouts). A plain copy of the layout's (rank, bytes), so a plan owns what it reads.
class BufferTable {
 public:
  struct Entry {
    int rank = 0;
    int64_t bytes = 0;
  };
  using Iterator = std::vector<Entry>::const_iterator;

  BufferTable() = default;
  BufferTable(const BufferList& buffers);                  // NOLINT: a layout's list converts
  BufferTable(std::initializer_list<BufferSpec> buffers);  // NOLINT
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const Entry& operator[](size_t i) const { return entries_[i]; }
  Iterator begin() const { return entries_.begin(); }
  Iterator end() const { return entries_.end(); }
  void push_back(const BufferSpec& buffer);
  // One more than the highest rank owning a buffer (0 when empty), kept as entries are added.
  int NumRanks() const { return num_ranks_; }

 private:
  std::vector<Entry> entries_;
  int num_ranks_ = 0;
};

// Where a Send/Forward's bytes start, or where a Recv's bytes land: a buffer and a byte offset in
// it. The size is the op's `bytes` (Op::Data() gives the whole ByteRange).
struct DataPlace {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;
};

// One op: 64 bytes, one cache line (a refit's plan has hundreds of thousands).
struct Op {
  int id = 0;  // index in TransferPlan::ops
  OpKind kind = OpKind::kCopy;
  LinkClass link = LinkClass::kSameRank;
  // Quantize: the format of the scales it writes, and so how it quantizes (core/base/fp8_block.h).
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32;
  int rank = 0;                         // the rank that executes it
  int peer = -1;                        // Send/Recv/Forward: the other rank
  // Send/Forward/Recv: pairs a sender with its receiver. Non-negative; like op ids, below 2^31.
  int message = -1;
  int round = 0;                        // scheduling round (lower first)
  int64_t bytes = 0;                    // payload bytes moved by this op
  // Ops on the same rank that must complete first: TransferPlan::dep_list[deps_begin, deps_end).
  int deps_begin = 0, deps_end = 0;
  // Copy/Pack/Unpack/Convert: TransferPlan::copies[copies_begin, copies_end).
  int copies_begin = 0, copies_end = 0;
  // Send/Forward: where the `bytes` sent start; Recv: where they land; Quantize: where its
  // scales start.
  DataPlace data;

  int NumDeps() const { return deps_end - deps_begin; }
  int NumCopies() const { return copies_end - copies_begin; }
  // Send/Forward/Recv: the bytes moved, [data.offset, data.offset + bytes) of data's buffer.
  ByteRange Data() const { return ByteRange(data.space, data.buffer, data.offset, bytes); }
  // Send/Forward/Recv: sets `data` and `bytes` to `range`'s.
  void SetData(const ByteRange& range) {
    data = {range.space, range.buffer, range.offset};
    bytes = range.bytes;
  }
};
static_assert(sizeof(Op) == 64, "an Op is one cache line");

// A Quantize op's shape of matrices: its values' `matrices` x [rows, cols] (from a 2- or 3-dim
// region; a region of another ndim gives matrices 0).
struct QuantizeShape {
  int64_t matrices = 0, rows = 0, cols = 0;
  int64_t ScaleBytes(Fp8ScaleFormat f) const { return matrices * Fp8ScaleMatrixBytes(f, rows, cols); }
};
inline QuantizeShape QuantizeShapeOf(const Region& values) {
  if (values.ndim == 2) return {1, values.shape[0], values.shape[1]};
  if (values.ndim == 3) return {values.shape[0], values.shape[1], values.shape[2]};
  return {};
}
// Where a Quantize op writes its scales: op.data for their bytes in the op's scale_fmt.
inline ByteRange QuantizeScales(const Op& op, const Region& values) {
  return ByteRange(op.data.space, op.data.buffer, op.data.offset,
                   QuantizeShapeOf(values).ScaleBytes(op.scale_fmt));
}

struct TransferPlan {
  std::string strategy;  // "reshard" or "gather-broadcast"
  int num_ranks = 0;     // ranks are 0..num_ranks-1
  BufferTable source_buffers;       // the source layout's buffers, by index
  BufferTable destination_buffers;  // the destination layout's buffers, by index
  std::vector<StagingSlot> slots;
  std::vector<Op> ops;
  std::vector<int> dep_list;       // every op's deps, each op's a range (Op::deps_begin/end)
  std::vector<PackedCopy> copies;  // every op's copy pairs, each op's a range
  std::vector<int64_t> copy_dims;  // the packed copies' geometry records

  // An op's deps and copy pairs. The span and range stay valid until the lists grow.
  std::span<const int> Deps(const Op& op) const {
    return {dep_list.data() + op.deps_begin, dep_list.data() + op.deps_end};
  }
  CopyRange Copies(const Op& op) const { return {this, op.copies_begin, op.copies_end}; }
  // Copy pair `index` of `copies`, unpacked.
  CopyPair Copy(int index) const;
  // Packs a copy pair onto the end of `copies` (an op's pairs must be appended consecutively),
  // sharing an equal geometry record already in copy_dims when one is found.
  void AppendCopy(const Region& from, const Region& to, ElementFn fn = ElementFn::kNone);
  // The same for a pair whose sides share `shape` (`ndim` values), without building Regions.
  // Inline, with 1, 2 and 3 dims unrolled: the planner appends a million of these.
  [[gnu::always_inline]] void AppendCopy(const CopyEnd& from, const CopyEnd& to, int ndim,
                                         const int64_t* shape) {
    if (ndim == 2) {
      AppendSharedShapeCopy<2>(from, to, ndim, shape);
    } else if (ndim == 1) {
      AppendSharedShapeCopy<1>(from, to, ndim, shape);
    } else if (ndim == 3) {
      AppendSharedShapeCopy<3>(from, to, ndim, shape);
    } else {
      AppendSharedShapeCopy<0>(from, to, ndim, shape);
    }
  }
  // The geometry of pair `index` of `copies`.
  PairGeometry GeometryOf(int index) const {
    return PairGeometry::FromHeader(copy_dims[static_cast<size_t>(copies[index].geometry)]);
  }

  // Appends an op, assigning its id; its dep and copy ranges are taken as set (the caller
  // appended them with dep_list.push_back / AppendCopy). Inline: the planner adds a million.
  int AddOp(const Op& op) {
    ops.push_back(op);
    const int id = static_cast<int>(ops.size()) - 1;
    ops.back().id = id;
    return id;
  }
  // Appends an op with these deps and copy pairs (appended to the lists), assigning its id.
  int AddOp(Op op, const std::vector<int>& deps, const std::vector<CopyPair>& pairs = {});
  // Replaces op `id`'s deps or copy pairs (the new ones are appended; the old entries stay in
  // the lists, unreferenced). For tools and tests that edit a plan.
  void SetDeps(int id, const std::vector<int>& deps);
  void SetCopies(int id, const std::vector<CopyPair>& pairs);
  // Appends a staging slot on `rank`; returns its index.
  int AddSlot(int rank, int64_t bytes) {
    slots.push_back({rank, bytes});
    return static_cast<int>(slots.size()) - 1;
  }
  // Op ids executed by `rank`, in plan order (which respects deps).
  std::vector<int> OpsOfRank(int rank) const;
  // (sender op id, receiver op id) for every Send/Forward whose message has a Recv, ordered by
  // message id. A message with several senders or receivers pairs the first of each (ValidatePlan
  // reports that as an error).
  std::vector<std::pair<int, int>> MatchedMessages() const;

 private:
  // AppendCopy(CopyEnd...) for `kDims` dims, or for any `ndim` when kDims is 0. The record
  // (header, shape, then the strides of each strided side) is hashed and compared in place: none
  // is built unless it is new.
  template <int kDims>
  [[gnu::always_inline]] void AppendSharedShapeCopy(const CopyEnd& from, const CopyEnd& to, int ndim,
                                                    const int64_t* shape) {
    const int n = kDims > 0 ? kDims : std::clamp(ndim, 0, kMaxDims);
    PairGeometry g;
    g.from_space = from.space;
    g.to_space = to.space;
    g.from_dtype = from.dtype;
    g.to_dtype = to.dtype;
    g.from_ndim = g.to_ndim =
        static_cast<int8_t>(kDims > 0 ? kDims : std::clamp(ndim, -1, kMaxDims + 1));
    g.flags = static_cast<uint8_t>(PairGeometry::kSharedShape |
                                   (from.strides == nullptr ? PairGeometry::kFromDense : 0) |
                                   (to.strides == nullptr ? PairGeometry::kToDense : 0));
    const int64_t header = g.Header();
    uint64_t hash = MixGeometryHash(0, header);
    for (int d = 0; d < n; ++d) hash = MixGeometryHash(hash, shape[d]);
    if (from.strides != nullptr) {
      for (int d = 0; d < n; ++d) hash = MixGeometryHash(hash, from.strides[d]);
    }
    if (to.strides != nullptr) {
      for (int d = 0; d < n; ++d) hash = MixGeometryHash(hash, to.strides[d]);
    }
    const size_t length =
        1 + static_cast<size_t>(n) * (1 + (from.strides != nullptr) + (to.strides != nullptr));
    int64_t& entry = GeometrySlot(hash);
    bool found = entry >= 0 && static_cast<size_t>(entry) + length <= copy_dims.size();
    if (found) {
      const int64_t* stored = copy_dims.data() + entry;
      found = *stored++ == header;
      for (int d = 0; d < n; ++d) found &= *stored++ == shape[d];
      if (from.strides != nullptr) {
        for (int d = 0; d < n; ++d) found &= *stored++ == from.strides[d];
      }
      if (to.strides != nullptr) {
        for (int d = 0; d < n; ++d) found &= *stored++ == to.strides[d];
      }
    }
    if (!found) {
      entry = static_cast<int64_t>(copy_dims.size());
      copy_dims.push_back(header);
      copy_dims.insert(copy_dims.end(), shape, shape + n);
      if (from.strides != nullptr) copy_dims.insert(copy_dims.end(), from.strides, from.strides + n);
      if (to.strides != nullptr) copy_dims.insert(copy_dims.end(), to.strides, to.strides + n);
    }
    copies.push_back({from.offset, to.offset, entry, from.buffer, to.buffer});
  }
  // Geometry records are shared through a direct-mapped table of recent records by hash: a miss
  // only costs a duplicate record, and a hit is compared value by value (so edits of copy_dims
  // stay safe).
  static uint64_t MixGeometryHash(uint64_t hash, int64_t value) {
    return (hash ^ static_cast<uint64_t>(value)) * 0x9e3779b97f4a7c15ull;
  }
  // The table entry for `hash`: a copy_dims index, or -1.
  int64_t& GeometrySlot(uint64_t hash) {
    constexpr int kTableBits = 12;
    if (geometry_table_.empty()) geometry_table_.assign(size_t{1} << kTableBits, -1);
    return geometry_table_[hash >> (64 - kTableBits)];
  }
  // Index in copy_dims of a record equal to values[0, length), appended when none is found.
  int64_t InternGeometry(const int64_t* values, size_t length);
  std::vector<int64_t> geometry_table_;  // copy_dims index per hash slot, -1 when empty
};

}  // namespace ferry
