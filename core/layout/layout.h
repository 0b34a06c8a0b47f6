// The layout model: TensorSpec (a logical tensor), BufferSpec (a memory region on one rank),
// Location and Fragment (a box of a tensor stored somewhere), and Layout (all fragments of one side
// of a refit). Replicas, uneven shards, fused buffers, interleaved QKV, FSDP flat shards and padding
// are all expressed as plain fragments; see docs/layout-format.md.
//
// Addressing: element `i` (an index inside fragment.box) of a fragment lives at byte
//   buffer_base + loc.byte_offset + sum_d (i[d] - box.lo[d]) * loc.strides[d] * DTypeSize(dtype)
// so byte_offset addresses the box's first element and strides are in elements.
//
// Layout is a plain value type: not thread-safe for mutation, safe to share read-only.
// Name lookups (FindTensor, FindBuffer, AddTensor, GetOrAddBuffer) are O(1) through hash indexes that
// the non-const methods keep up to date; const lookups only read them (falling back to a scan when
// entries were appended directly to the public vectors, or the last entry was replaced). Renaming a
// tensor or buffer in place other than the last one, through the public vectors, is not supported:
// build a new Layout instead.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/fp8_scale_format.h"
#include "core/base/status.h"
#include "core/layout/box.h"
#include "core/layout/buffer_list.h"
#include "core/layout/fragment_table.h"

namespace ferry {

struct TensorSpec {
  std::string name;            // canonical (Hugging Face style) name, unique in a layout
  std::vector<int64_t> shape;  // global shape, 1 to 8 dims
  DType dtype = DType::kBF16;

  // Both saturate at kSaturated (core/base/checked_math.h) rather than overflow.
  int64_t NumElements() const;
  int64_t NumBytes() const;
};

// A region of a tensor that no fragment needs to cover (vocab padding, for example).
struct PaddingRegion {
  int tensor = 0;
  Box box;
};

// A tensor that a layout's owner keeps transformed rather than as the checkpoint holds it (vLLM's
// Mamba A = -exp(A_log) in fp32, an FP8 weight with block scales, a matrix derived after loading):
// its fragments say where the stored values lie, counting offsets and strides in elements of
// `stored_dtype`. Copying the other side's bytes into them, or reading them as the tensor, would
// give values of another meaning, so plans refuse such layouts (CheckNoStoredTransforms), except
// where the planner applies the transform: the fp8 tensors of block-scaled buffers
// (BlockScaledBuffer), which the reshard planner quantizes, and transforms that are an element
// function (core/base/element_fn.h ElementFnTransform: "A = -exp(A_log)" into fp32), which plans
// apply in Convert ops on the destination rank (planner/element_transforms.h).
struct StoredTransform {
  int tensor = 0;
  std::string transform;  // what is stored, e.g. "A = -exp(A_log)"
  DType stored_dtype = DType::kFP32;
};

// A buffer that holds block-scaled fp8 (vLLM's quant=fp8_block, core/base/fp8_block.h):
// `matrices` dense row-major [rows, cols] e4m3fn matrices, one byte an element, quantized in
// 128x128 blocks of each matrix, whose scale_inv lie in buffer `scales` (same rank) as dense fp32
// [matrices, ceil(rows/128), ceil(cols/128)], in format `scale_fmt` (core/base/
// fp8_scale_format.h: any fp32, or powers of two with the values requantized to them). The
// tensors with fragments in `buffer` carry a StoredTransform; the planner quantizes into such a
// buffer (planner/block_quantize.h).
struct BlockScaledBuffer {
  int buffer = 0;
  int scales = 0;
  int64_t matrices = 1, rows = 0, cols = 0;
  Fp8ScaleFormat scale_fmt = Fp8ScaleFormat::kFloat32;
};

// Row-major element strides for a box of this shape.
std::array<int64_t, kMaxDims> RowMajorStrides(const std::vector<int64_t>& shape);

class Layout {
 public:
  std::vector<TensorSpec> tensors;
  BufferList buffers;       // BufferSpecs by index: buffer_list.h
  FragmentTable fragments;  // compact: see fragment_table.h
  std::vector<PaddingRegion> padding;
  std::vector<StoredTransform> transforms;
  std::vector<BlockScaledBuffer> block_scaled;

  // Adds a tensor; fails if the name exists with another shape or dtype, returns the existing
  // index if it exists with the same ones.
  Result<int> AddTensor(const TensorSpec& spec);
  // Index of the tensor with this name, or -1.
  int FindTensor(const std::string& name) const;
  // Whether the tensor names are known to be distinct without comparing them: the name index
  // covers every tensor with one entry each (tensors added through AddTensor). False means unknown.
  bool TensorNamesKnownDistinct() const;
  // Index of the buffer (rank, name), created empty if new.
  int GetOrAddBuffer(int rank, const std::string& name);
  // Index of the buffer (rank, name), or -1.
  int FindBuffer(int rank, const std::string& name) const;

  // Places `box` of `tensor` at the end of buffer (rank, buffer_name), contiguous row-major, and
  // grows the buffer. Returns the fragment index.
  int AppendFragment(int tensor, const Box& box, int rank, const std::string& buffer_name);
  // Places `box` of `tensor` at an explicit byte offset with explicit element strides in buffer
  // (rank, buffer_name); grows the buffer to cover the fragment's last byte. Returns its index.
  int PlaceFragment(int tensor, const Box& box, int rank, const std::string& buffer_name,
                    int64_t byte_offset, const std::array<int64_t, kMaxDims>& strides);

  // Declares a region of `tensor` that needs no fragment.
  void AddPadding(int tensor, const Box& box) { padding.push_back({tensor, box}); }

  // Sorted distinct ranks that hold at least one buffer.
  std::vector<int> Ranks() const;
  // Bytes of fragment data held per rank (replicas counted on each rank).
  std::map<int, int64_t> BytesPerRank() const;
  // Bytes of fragment data on all ranks (replicas counted on each rank): what a refit delivers
  // into this layout when it is the destination.
  int64_t FragmentBytes() const;
  // Total bytes of all logical tensors (each counted once).
  int64_t LogicalBytes() const;

  // Byte span [first, last] touched by a fragment inside its buffer, as (offset, length), with
  // its tensor's elements of the tensor's dtype, or of `stored` (StoredDTypes: a tensor stored
  // transformed may be wider).
  std::pair<int64_t, int64_t> FragmentSpan(const Fragment& f) const;
  std::pair<int64_t, int64_t> FragmentSpan(const Fragment& f, DType stored) const;

 private:
  // Brings the name indexes up to date with `tensors` and `buffers` (appended entries are indexed,
  // a shrunk vector triggers a rebuild).
  void SyncIndexes();
  static std::string BufferKey(int rank, const std::string& name);

  std::unordered_map<std::string, int> tensor_index_;
  std::unordered_map<std::string, int> buffer_index_;  // key: BufferKey(rank, name)
  size_t tensors_indexed_ = 0;
  size_t buffers_indexed_ = 0;
};

// Per tensor of `layout`: the dtype its fragments' elements are stored in, its StoredTransform's
// stored_dtype when it has one, else its own dtype.
std::vector<DType> StoredDTypes(const Layout& layout);

// Per tensor of `layout`: whether it has a fragment in a block-scaled buffer (block_scaled).
std::vector<char> BlockScaledTensorMask(const Layout& layout);

// Ok when neither layout stores a tensor transformed; otherwise InvalidArgument naming the first
// such tensor, its side and its transform: plans copy bytes as they are. The planner calls it on
// the layouts it plans after taking out the transforms it applies (planner/planner.h), so what is
// left is what it has no op for.
Status CheckNoStoredTransforms(const Layout& source, const Layout& destination);

}  // namespace ferry
