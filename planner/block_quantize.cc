// Block-scaled fp8 destinations: twin buffers before planning, staging slots and Quantize ops
// after (planner/block_quantize.h).
#include "planner/block_quantize.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "planner/twin_slots.h"

namespace ferry {
namespace {

bool WideFloat(DType d) { return d == DType::kBF16 || d == DType::kFP16 || d == DType::kFP32; }

// Appends to `out` the pieces of fp8 fragment `f` (one byte an element) that each lie inside one
// matrix of `matrix_elems` elements, splitting dims from `dim` on into single slices; false when
// a single row of the fragment spans two matrices.
bool SplitToMatrices(const Fragment& f, int64_t matrix_elems, int dim, std::vector<Fragment>& out) {
  int64_t last = f.loc.byte_offset;
  for (int d = 0; d < f.box.ndim; ++d) last += (f.box.Extent(d) - 1) * f.loc.strides[d];
  if (f.loc.byte_offset / matrix_elems == last / matrix_elems) {
    out.push_back(f);
    return true;
  }
  if (dim >= f.box.ndim - 1) return false;
  if (f.box.Extent(dim) == 1) return SplitToMatrices(f, matrix_elems, dim + 1, out);
  for (int64_t i = f.box.lo[dim]; i < f.box.hi[dim]; ++i) {
    Fragment g = f;
    g.box.lo[dim] = i;
    g.box.hi[dim] = i + 1;
    g.loc.byte_offset = f.loc.byte_offset + (i - f.box.lo[dim]) * f.loc.strides[dim];
    if (!SplitToMatrices(g, matrix_elems, dim + 1, out)) return false;
  }
  return true;
}

// The source dtype of each block-scaled buffer (by block_scaled index), checked: every tensor
// in it exists in `source` as bf16, fp16 or fp32, all of one dtype, and carries an fp8
// StoredTransform. `quantized` gets, per destination tensor, whether it lies in such a buffer.
Result<std::vector<DType>> TwinDTypes(const Layout& source, const Layout& destination,
                                      const std::vector<int>& scaled_of, std::vector<char>& quantized) {
  std::vector<DType> dtypes(destination.block_scaled.size(), DType::kUInt8);
  quantized.assign(destination.tensors.size(), 0);
  for (const Fragment& f : destination.fragments) {
    const int k = scaled_of[static_cast<size_t>(f.loc.buffer)];
    if (k < 0) continue;
    const std::string& name = destination.tensors[static_cast<size_t>(f.tensor)].name;
    const int s = source.FindTensor(name);
    const DType d = s < 0 ? DType::kUInt8 : source.tensors[static_cast<size_t>(s)].dtype;
    const std::string where = "block-scaled fp8 tensor '" + name + "'";
    if (!WideFloat(d)) {
      return InvalidArgument(where + ": the source holds it " +
                             (s < 0 ? std::string("not at all") : "as " + std::string(DTypeName(d))) +
                             "; block quantization reads bf16, fp16 or fp32");
    }
    DType& want = dtypes[static_cast<size_t>(k)];
    if (want != DType::kUInt8 && want != d) {
      return InvalidArgument(where + ": its buffer mixes source dtypes " + std::string(DTypeName(want)) +
                             " and " + std::string(DTypeName(d)));
    }
    want = d;
    quantized[static_cast<size_t>(f.tensor)] = 1;
  }
  for (size_t t = 0; t < quantized.size(); ++t) {
    if (!quantized[t]) continue;
    const bool marked = std::any_of(destination.transforms.begin(), destination.transforms.end(),
                                    [&](const StoredTransform& x) {
                                      return x.tensor == static_cast<int>(t) && x.stored_dtype == DType::kFP8E4M3;
                                    });
    if (!marked) {
      return InvalidArgument("tensor '" + destination.tensors[t].name +
                             "' lies in a block-scaled buffer without an fp8_e4m3 stored transform");
    }
  }
  return dtypes;
}

// Moves the fragments of block-scaled buffers into twins (created on first use), counting the
// elements each twin receives in `covered`.
Status MoveIntoTwins(const Layout& destination, const std::vector<int>& scaled_of,
                     const std::vector<DType>& dtypes, BlockQuantizeLayout& out,
                     std::vector<int64_t>& covered) {
  Layout& l = out.destination;
  std::map<std::pair<int, int64_t>, size_t> twin_of;  // (buffer, matrix) -> twins index
  FragmentTable moved;
  moved.reserve(destination.fragments.size());
  std::vector<Fragment> pieces;
  for (const Fragment& f : destination.fragments) {
    const int k = scaled_of[static_cast<size_t>(f.loc.buffer)];
    if (k < 0) {
      moved.push_back(f);
      continue;
    }
    const BlockScaledBuffer& s = destination.block_scaled[static_cast<size_t>(k)];
    const DType dtype = dtypes[static_cast<size_t>(k)];
    const int64_t matrix_elems = s.rows * s.cols;
    pieces.clear();
    if (!SplitToMatrices(f, matrix_elems, 0, pieces)) {
      return InvalidArgument("a fragment of '" + destination.tensors[static_cast<size_t>(f.tensor)].name +
                             "' spans two matrices of block-scaled buffer '" +
                             destination.buffers[static_cast<size_t>(f.loc.buffer)].name + "'");
    }
    for (Fragment p : pieces) {
      const int64_t m = p.loc.byte_offset / matrix_elems;
      auto [it, added] = twin_of.try_emplace({f.loc.buffer, m}, out.twins.size());
      if (added) {
        const std::string& name = destination.buffers[static_cast<size_t>(f.loc.buffer)].name;
        const int twin = l.GetOrAddBuffer(f.loc.rank, name + " [matrix " + std::to_string(m) + " as " +
                                                          std::string(DTypeName(dtype)) + "]");
        l.buffers.SetBytes(static_cast<size_t>(twin), matrix_elems * DTypeSize(dtype));
        out.twins.push_back({f.loc.rank, f.loc.buffer, s.scales, m, s.rows, s.cols, dtype, twin, s.scale_fmt});
        covered.push_back(0);
      }
      p.loc.buffer = out.twins[it->second].twin;
      p.loc.byte_offset = (p.loc.byte_offset - m * matrix_elems) * DTypeSize(dtype);
      covered[it->second] += p.box.Volume();
      moved.push_back(p);
    }
  }
  l.fragments = std::move(moved);
  return Status::Ok();
}

}  // namespace

Result<BlockQuantizeLayout> PrepareBlockQuantize(const Layout& source, const Layout& destination) {
  BlockQuantizeLayout out;
  out.original_buffers = destination.buffers.size();
  if (destination.block_scaled.empty()) return out;
  std::vector<int> scaled_of(destination.buffers.size(), -1);
  for (size_t k = 0; k < destination.block_scaled.size(); ++k) {
    scaled_of[static_cast<size_t>(destination.block_scaled[k].buffer)] = static_cast<int>(k);
  }
  std::vector<char> quantized;
  FERRY_ASSIGN_OR_RETURN(const std::vector<DType> dtypes,
                         TwinDTypes(source, destination, scaled_of, quantized));
  out.destination = destination;
  Layout& l = out.destination;
  l.block_scaled.clear();
  std::erase_if(l.transforms, [&](const StoredTransform& x) {
    return x.tensor >= 0 && static_cast<size_t>(x.tensor) < quantized.size() && quantized[static_cast<size_t>(x.tensor)];
  });
  for (const Fragment& f : destination.fragments) {
    const int k = scaled_of[static_cast<size_t>(f.loc.buffer)];
    if (k >= 0) l.tensors[static_cast<size_t>(f.tensor)].dtype = dtypes[static_cast<size_t>(k)];
  }
  std::vector<int64_t> covered;
  FERRY_RETURN_IF_ERROR(MoveIntoTwins(destination, scaled_of, dtypes, out, covered));
  std::vector<int64_t> matrices_seen(destination.block_scaled.size(), 0);
  for (size_t i = 0; i < out.twins.size(); ++i) {
    const QuantizeTwin& t = out.twins[i];
    ++matrices_seen[static_cast<size_t>(scaled_of[static_cast<size_t>(t.buffer)])];
    if (covered[i] != t.rows * t.cols) {
      return InvalidArgument("block-scaled buffer '" + destination.buffers[static_cast<size_t>(t.buffer)].name +
                             "': its fragments cover " + std::to_string(covered[i]) + " of the " +
                             std::to_string(t.rows * t.cols) + " elements of matrix " +
                             std::to_string(t.matrix) + "; quantizing needs all of them");
    }
  }
  for (size_t k = 0; k < destination.block_scaled.size(); ++k) {
    const BlockScaledBuffer& s = destination.block_scaled[k];
    if (matrices_seen[k] != s.matrices) {
      return InvalidArgument("block-scaled buffer '" + destination.buffers[static_cast<size_t>(s.buffer)].name +
                             "': fragments reach " + std::to_string(matrices_seen[k]) + " of its " +
                             std::to_string(s.matrices) + " matrices");
    }
  }
  return out;
}

void FinishBlockQuantize(const BlockQuantizeLayout& prepared, const Layout& destination,
                         TransferPlan& plan) {
  if (prepared.twins.empty()) return;
  const size_t first = prepared.original_buffers;
  std::vector<int> slot_of_buffer(prepared.destination.buffers.size() - first, -1);
  for (const QuantizeTwin& t : prepared.twins) {
    slot_of_buffer[static_cast<size_t>(t.twin) - first] = plan.AddSlot(t.rank, t.rows * t.cols * DTypeSize(t.dtype));
  }
  const std::vector<std::vector<int>> users = TwinsToSlots(plan, first, slot_of_buffer);
  plan.destination_buffers = destination.buffers;
  for (size_t k = 0; k < prepared.twins.size(); ++k) {
    const QuantizeTwin& t = prepared.twins[k];
    const std::vector<int>& deps = users[static_cast<size_t>(t.twin) - first];
    const int64_t scale_bytes = Fp8ScaleMatrixBytes(t.scale_fmt, t.rows, t.cols);
    Op q;
    q.kind = OpKind::kQuantize;
    q.scale_fmt = t.scale_fmt;
    q.link = LinkClass::kSameRank;
    q.rank = t.rank;
    for (int d : deps) q.round = std::max(q.round, plan.ops[static_cast<size_t>(d)].round);
    q.bytes = t.rows * t.cols + scale_bytes;
    q.data = {Space::kDestination, t.scales, t.matrix * scale_bytes};
    CopyPair values;
    values.from = Region{Space::kStaging, slot_of_buffer[static_cast<size_t>(t.twin) - first], 0, t.dtype, 2,
                         {t.rows, t.cols}, {t.cols, 1}};
    values.to = Region{Space::kDestination, t.buffer, t.matrix * t.rows * t.cols, DType::kFP8E4M3, 2,
                       {t.rows, t.cols}, {t.cols, 1}};
    plan.AddOp(q, deps, {values});
  }
}

}  // namespace ferry
