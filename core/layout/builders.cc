// Builders: device-mesh placements, Megatron helpers, FSDP flat shards and fused parameters turned
// into plain fragments. Every builder is O(fragments it adds + ranks it is given).
#include "core/layout/builders.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/base/strings.h"

namespace ferry {
namespace {

Status CheckTensor(const TensorSpec& t) {
  if (t.name.empty()) return InvalidArgument("tensor has an empty name");
  if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kMaxDims)) {
    return InvalidArgument("tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                           " dims; ferry supports 1 to 8");
  }
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] <= 0) {
      return InvalidArgument("tensor '" + t.name + "' has non-positive extent " +
                             std::to_string(t.shape[d]) + " in dim " + std::to_string(d) +
                             " (shape " + FormatInts(t.shape) + ")");
    }
  }
  return Status::Ok();
}

// Fails if `layout` already has a tensor of this name with another shape or dtype, so builders can
// reject bad input before they change the layout.
Status CheckAddable(const Layout& layout, const TensorSpec& t) {
  const int existing = layout.FindTensor(t.name);
  if (existing < 0) return Status::Ok();
  const TensorSpec& have = layout.tensors[existing];
  if (have.shape != t.shape || have.dtype != t.dtype) {
    return InvalidArgument("tensor '" + t.name + "' is already in the layout as " +
                           FormatInts(have.shape) + " " + std::string(DTypeName(have.dtype)) +
                           ", not " + FormatInts(t.shape) + " " + std::string(DTypeName(t.dtype)));
  }
  return Status::Ok();
}

Status CheckRanks(const std::vector<int>& ranks, const std::string& what) {
  if (ranks.empty()) return InvalidArgument(what + ": empty rank list");
  for (int r : ranks) {
    if (r < 0) return InvalidArgument(what + ": negative rank " + std::to_string(r));
  }
  return Status::Ok();
}

// [lo, hi) of chunk `index` of `n` split into `parts` by the torch.chunk rule.
std::pair<int64_t, int64_t> ChunkRange(int64_t n, int64_t parts, int64_t index) {
  int64_t chunk = (n + parts - 1) / parts;
  return {std::min(index * chunk, n), std::min((index + 1) * chunk, n)};
}

void FlatRangeRecurse(const std::vector<int64_t>& shape, const std::vector<int64_t>& inner, int dim,
                      Box& prefix, int64_t begin, int64_t end, std::vector<Box>& out) {
  if (begin >= end) return;
  const int ndim = static_cast<int>(shape.size());
  if (dim == ndim - 1) {
    Box b = prefix;
    b.lo[dim] = begin;
    b.hi[dim] = end;
    out.push_back(b);
    return;
  }
  const int64_t row = inner[dim];  // elements per index of `dim` inside the sub-tensor
  const int64_t first = begin / row;
  const int64_t last = (end - 1) / row;
  auto sub = [&](int64_t index, int64_t b, int64_t e) {
    prefix.lo[dim] = index;
    prefix.hi[dim] = index + 1;
    FlatRangeRecurse(shape, inner, dim + 1, prefix, b, e, out);
  };
  if (first == last) {
    sub(first, begin - first * row, end - first * row);
    return;
  }
  int64_t full_begin = first;
  if (begin % row != 0) {
    sub(first, begin % row, row);
    full_begin = first + 1;
  }
  const int64_t full_end = end / row;
  if (full_begin < full_end) {
    Box b = prefix;
    b.lo[dim] = full_begin;
    b.hi[dim] = full_end;
    for (int d = dim + 1; d < ndim; ++d) {
      b.lo[d] = 0;
      b.hi[d] = shape[d];
    }
    out.push_back(b);
  }
  if (end % row != 0) sub(full_end, 0, end % row);
}

}  // namespace

std::vector<int64_t> ChunkSizes(int64_t n, int parts) {
  std::vector<int64_t> sizes;
  if (parts <= 0) return sizes;
  sizes.reserve(parts);
  for (int i = 0; i < parts; ++i) {
    auto [lo, hi] = ChunkRange(n, parts, i);
    sizes.push_back(hi - lo);
  }
  return sizes;
}

Result<std::vector<int64_t>> EvenSizes(int64_t n, int parts) {
  if (parts <= 0) return InvalidArgument("cannot split into " + std::to_string(parts) + " parts");
  if (n % parts != 0) {
    return InvalidArgument("extent " + std::to_string(n) + " is not divisible by " +
                           std::to_string(parts));
  }
  return std::vector<int64_t>(parts, n / parts);
}

Placement Shard(int dim) { return Placement{Placement::Kind::kShard, dim, {}}; }
Placement ShardUneven(int dim, std::vector<int64_t> sizes) {
  return Placement{Placement::Kind::kShard, dim, std::move(sizes)};
}
Placement Replicate() { return Placement{Placement::Kind::kReplicate, 0, {}}; }

DeviceMesh DeviceMesh::Make(std::vector<int64_t> shape, std::vector<int> ranks) {
  return DeviceMesh{std::move(shape), std::move(ranks)};
}

DeviceMesh DeviceMesh::Iota(std::vector<int64_t> shape, int first_rank) {
  int64_t n = 1;
  for (int64_t s : shape) n *= std::max<int64_t>(s, 0);
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), first_rank);
  return DeviceMesh{std::move(shape), std::move(ranks)};
}

Result<std::vector<std::pair<int, Box>>> MeshBoxes(const TensorSpec& tensor, const DeviceMesh& mesh,
                                                   const std::vector<Placement>& placements) {
  FERRY_RETURN_IF_ERROR(CheckTensor(tensor));
  const std::string what = "mesh placement of tensor '" + tensor.name + "'";
  if (mesh.shape.empty()) return InvalidArgument(what + ": mesh has no dims");
  if (placements.size() != mesh.shape.size()) {
    return InvalidArgument(what + ": " + std::to_string(placements.size()) +
                           " placements for a mesh of " + std::to_string(mesh.shape.size()) +
                           " dims " + FormatInts(mesh.shape));
  }
  int64_t mesh_size = 1;
  for (int64_t s : mesh.shape) {
    if (s <= 0) return InvalidArgument(what + ": mesh shape " + FormatInts(mesh.shape));
    mesh_size *= s;
  }
  if (static_cast<int64_t>(mesh.ranks.size()) != mesh_size) {
    return InvalidArgument(what + ": mesh shape " + FormatInts(mesh.shape) + " has " +
                           std::to_string(mesh_size) + " positions but " +
                           std::to_string(mesh.ranks.size()) + " ranks were given");
  }
  FERRY_RETURN_IF_ERROR(CheckRanks(mesh.ranks, what));
  const int ndim = static_cast<int>(tensor.shape.size());
  const int mdims = static_cast<int>(mesh.shape.size());
  // Prefix sums of explicit uneven sizes, per mesh dim.
  std::vector<std::vector<int64_t>> starts(mdims);
  for (int m = 0; m < mdims; ++m) {
    const Placement& p = placements[m];
    if (p.kind != Placement::Kind::kShard) continue;
    if (p.dim < 0 || p.dim >= ndim) {
      return InvalidArgument(what + ": mesh dim " + std::to_string(m) + " shards tensor dim " +
                             std::to_string(p.dim) + " but the tensor has " + std::to_string(ndim) +
                             " dims");
    }
    if (p.sizes.empty()) continue;
    if (static_cast<int64_t>(p.sizes.size()) != mesh.shape[m]) {
      return InvalidArgument(what + ": mesh dim " + std::to_string(m) + " of size " +
                             std::to_string(mesh.shape[m]) + " has " +
                             std::to_string(p.sizes.size()) + " explicit shard sizes");
    }
    starts[m].assign(1, 0);
    for (int64_t s : p.sizes) {
      if (s < 0) return InvalidArgument(what + ": negative shard size " + std::to_string(s));
      starts[m].push_back(starts[m].back() + s);
    }
  }
  std::vector<std::pair<int, Box>> out;
  out.reserve(mesh_size);
  std::vector<int64_t> coord(mdims, 0);
  for (int64_t i = 0; i < mesh_size; ++i) {
    Box box = Box::FromShape(tensor.shape);
    for (int m = 0; m < mdims; ++m) {
      const Placement& p = placements[m];
      if (p.kind != Placement::Kind::kShard) continue;
      const int d = p.dim;
      const int64_t extent = box.hi[d] - box.lo[d];
      int64_t lo, hi;
      if (starts[m].empty()) {
        std::tie(lo, hi) = ChunkRange(extent, mesh.shape[m], coord[m]);
      } else {
        if (starts[m].back() != extent) {
          return InvalidArgument(what + ": explicit sizes of mesh dim " + std::to_string(m) +
                                 " sum to " + std::to_string(starts[m].back()) +
                                 " but the region they split along tensor dim " +
                                 std::to_string(d) + " has extent " + std::to_string(extent));
        }
        lo = starts[m][coord[m]];
        hi = starts[m][coord[m] + 1];
      }
      box.hi[d] = box.lo[d] + hi;
      box.lo[d] += lo;
    }
    out.emplace_back(mesh.ranks[i], box);
    for (int m = mdims - 1; m >= 0; --m) {  // row-major increment
      if (++coord[m] < mesh.shape[m]) break;
      coord[m] = 0;
    }
  }
  return out;
}

Status AddMeshSharded(Layout& layout, const TensorSpec& tensor, const DeviceMesh& mesh,
                      const std::vector<Placement>& placements, const std::string& buffer_name) {
  FERRY_ASSIGN_OR_RETURN(auto boxes, MeshBoxes(tensor, mesh, placements));
  FERRY_ASSIGN_OR_RETURN(int t, layout.AddTensor(tensor));
  const std::string& buffer = buffer_name.empty() ? tensor.name : buffer_name;
  for (const auto& [rank, box] : boxes) {
    if (box.Empty()) continue;
    layout.AppendFragment(t, box, rank, buffer);
  }
  return Status::Ok();
}

namespace {

Status AddOneDimParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                         int dim, const char* kind, const std::string& buffer_name) {
  FERRY_RETURN_IF_ERROR(CheckTensor(tensor));
  const std::string what = std::string(kind) + " tensor '" + tensor.name + "'";
  FERRY_RETURN_IF_ERROR(CheckRanks(tp_ranks, what));
  if (static_cast<int>(tensor.shape.size()) <= dim) {
    return InvalidArgument(what + " needs at least " + std::to_string(dim + 1) +
                           " dims, has shape " + FormatInts(tensor.shape));
  }
  auto even = EvenSizes(tensor.shape[dim], static_cast<int>(tp_ranks.size()));
  if (!even.ok()) return even.status().WithContext(what + " dim " + std::to_string(dim));
  DeviceMesh mesh{{static_cast<int64_t>(tp_ranks.size())}, tp_ranks};
  return AddMeshSharded(layout, tensor, mesh, {Shard(dim)}, buffer_name);
}

}  // namespace

Status AddColumnParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                         const std::string& buffer_name) {
  return AddOneDimParallel(layout, tensor, tp_ranks, 0, "column-parallel", buffer_name);
}

Status AddRowParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                      const std::string& buffer_name) {
  return AddOneDimParallel(layout, tensor, tp_ranks, 1, "row-parallel", buffer_name);
}

Status AddVocabParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                        int64_t pad_multiple, const std::string& buffer_name) {
  FERRY_RETURN_IF_ERROR(CheckTensor(tensor));
  const std::string what = "vocab-parallel tensor '" + tensor.name + "'";
  FERRY_RETURN_IF_ERROR(CheckRanks(tp_ranks, what));
  if (pad_multiple < 1) {
    return InvalidArgument(what + ": pad_multiple " + std::to_string(pad_multiple) + " < 1");
  }
  FERRY_ASSIGN_OR_RETURN(int t, layout.AddTensor(tensor));
  const int64_t tp = static_cast<int64_t>(tp_ranks.size());
  const int64_t vocab = tensor.shape[0];
  const int64_t unit = pad_multiple * tp;
  const int64_t padded = (vocab + unit - 1) / unit * unit;
  const int64_t rows_per_rank = padded / tp;
  const int64_t row_bytes = tensor.NumElements() / vocab * DTypeSize(tensor.dtype);
  const std::string& buffer = buffer_name.empty() ? tensor.name : buffer_name;
  for (int64_t i = 0; i < tp; ++i) {
    const int rank = tp_ranks[i];
    const int b = layout.GetOrAddBuffer(rank, buffer);
    const int64_t base = layout.buffers[b].bytes;
    Box box = Box::FromShape(tensor.shape);
    box.lo[0] = std::min(i * rows_per_rank, vocab);
    box.hi[0] = std::min((i + 1) * rows_per_rank, vocab);
    if (!box.Empty()) {
      layout.PlaceFragment(t, box, rank, buffer, base, RowMajorStrides(box.Shape()));
    }
    // Room for the padded rows, which are not fragments.
    layout.buffers.GrowBytes(static_cast<size_t>(b), base + rows_per_rank * row_bytes);
  }
  return Status::Ok();
}

Status AddReplicated(Layout& layout, const TensorSpec& tensor, const std::vector<int>& ranks,
                     const std::string& buffer_name) {
  FERRY_RETURN_IF_ERROR(CheckTensor(tensor));
  FERRY_RETURN_IF_ERROR(CheckRanks(ranks, "replicated tensor '" + tensor.name + "'"));
  FERRY_ASSIGN_OR_RETURN(int t, layout.AddTensor(tensor));
  const std::string& buffer = buffer_name.empty() ? tensor.name : buffer_name;
  const Box full = Box::FromShape(tensor.shape);
  for (int rank : ranks) layout.AppendFragment(t, full, rank, buffer);
  return Status::Ok();
}

Result<std::vector<int>> PipelineStages(int num_layers, int pp) {
  if (pp < 1 || pp > num_layers) {
    return InvalidArgument("cannot split " + std::to_string(num_layers) + " layers over " +
                           std::to_string(pp) + " pipeline stages");
  }
  const int base = num_layers / pp;
  const int extra = num_layers % pp;  // the first `extra` stages take one more layer
  std::vector<int> stage_of(num_layers);
  int layer = 0;
  for (int s = 0; s < pp; ++s) {
    const int count = base + (s < extra ? 1 : 0);
    for (int i = 0; i < count; ++i) stage_of[layer++] = s;
  }
  return stage_of;
}

Result<std::vector<int>> ExpertOwners(int num_experts, int ep) {
  if (ep < 1 || num_experts < 1 || num_experts % ep != 0) {
    return InvalidArgument("cannot split " + std::to_string(num_experts) +
                           " experts evenly over expert-parallel size " + std::to_string(ep));
  }
  const int per_rank = num_experts / ep;
  std::vector<int> owner(num_experts);
  for (int e = 0; e < num_experts; ++e) owner[e] = e / per_rank;
  return owner;
}

std::vector<Box> FlatRangeToBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  std::vector<Box> out;
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims)) return out;
  const int ndim = static_cast<int>(shape.size());
  std::vector<int64_t> inner(ndim, 1);  // inner[d] = product of shape[d+1..]
  for (int d = ndim - 2; d >= 0; --d) inner[d] = inner[d + 1] * shape[d + 1];
  const int64_t total = inner[0] * shape[0];
  begin = std::clamp<int64_t>(begin, 0, total);
  end = std::clamp<int64_t>(end, 0, total);
  Box prefix;
  prefix.ndim = ndim;
  FlatRangeRecurse(shape, inner, 0, prefix, begin, end, out);
  return out;
}

Status AddFsdpFlatSharded(Layout& layout, const std::vector<TensorSpec>& tensors,
                          const std::vector<int>& ranks, const std::string& buffer_name,
                          int64_t align_elements) {
  const std::string what = "FSDP flat buffer '" + buffer_name + "'";
  if (buffer_name.empty()) return InvalidArgument("FSDP flat buffer needs a name");
  if (tensors.empty()) return InvalidArgument(what + ": no tensors");
  FERRY_RETURN_IF_ERROR(CheckRanks(ranks, what));
  if (align_elements < 1) {
    return InvalidArgument(what + ": align_elements " + std::to_string(align_elements) + " < 1");
  }
  const DType dtype = tensors[0].dtype;
  std::vector<int64_t> offsets;  // flat element offset of each tensor in the concatenation
  int64_t total = 0;
  for (const TensorSpec& t : tensors) {
    FERRY_RETURN_IF_ERROR(CheckTensor(t));
    FERRY_RETURN_IF_ERROR(CheckAddable(layout, t));
    if (t.dtype != dtype) {
      return InvalidArgument(what + ": tensor '" + t.name + "' has dtype " +
                             std::string(DTypeName(t.dtype)) + " but '" + tensors[0].name +
                             "' has " + std::string(DTypeName(dtype)) +
                             "; a flat buffer holds one dtype");
    }
    offsets.push_back(total);
    total += t.NumElements();
  }
  std::vector<int> ids;
  for (const TensorSpec& t : tensors) {
    FERRY_ASSIGN_OR_RETURN(int id, layout.AddTensor(t));
    ids.push_back(id);
  }
  const int64_t n = static_cast<int64_t>(ranks.size());
  const int64_t unit = n * align_elements;
  const int64_t chunk = (total + unit - 1) / unit * unit / n;
  const int64_t elem = DTypeSize(dtype);
  // Sweep tensors and rank chunks together: O(tensors + ranks + fragments).
  size_t ti = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int rank = ranks[i];
    const int b = layout.GetOrAddBuffer(rank, buffer_name);
    const int64_t base = layout.buffers[b].bytes;  // 0 unless the buffer already held data
    const int64_t c0 = i * chunk;
    const int64_t c1 = c0 + chunk;
    while (ti < tensors.size() && offsets[ti] + tensors[ti].NumElements() <= c0) ++ti;
    for (size_t tj = ti; tj < tensors.size() && offsets[tj] < c1; ++tj) {
      const int64_t t0 = offsets[tj];
      const int64_t lo = std::max(c0, t0) - t0;
      const int64_t hi = std::min(c1, t0 + tensors[tj].NumElements()) - t0;
      const auto strides = RowMajorStrides(tensors[tj].shape);
      for (const Box& box : FlatRangeToBoxes(tensors[tj].shape, lo, hi)) {
        int64_t first = 0;  // flat index of the box's first element in the tensor
        for (int d = 0; d < box.ndim; ++d) first += box.lo[d] * strides[d];
        layout.PlaceFragment(ids[tj], box, rank, buffer_name, base + (t0 + first - c0) * elem,
                             strides);
      }
    }
    layout.buffers.GrowBytes(static_cast<size_t>(b), base + chunk * elem);
  }
  return Status::Ok();
}

Status AddFusedConcat(Layout& layout, int rank, const std::string& buffer_name,
                      const std::vector<FusedPiece>& pieces, int concat_dim, int64_t base_offset) {
  const std::string what = "fused buffer '" + buffer_name + "' on rank " + std::to_string(rank);
  if (buffer_name.empty()) return InvalidArgument("fused buffer needs a name");
  if (rank < 0) return InvalidArgument(what + ": negative rank");
  if (pieces.empty()) return InvalidArgument(what + ": no pieces");
  if (base_offset < 0) return InvalidArgument(what + ": negative base offset");
  const int ndim = pieces[0].box.ndim;
  if (concat_dim < 0 || concat_dim >= ndim) {
    return InvalidArgument(what + ": concat dim " + std::to_string(concat_dim) +
                           " but pieces have " + std::to_string(ndim) + " dims");
  }
  const DType dtype = pieces[0].tensor.dtype;
  std::vector<int64_t> fused_shape = pieces[0].box.Shape();
  fused_shape[concat_dim] = 0;
  for (const FusedPiece& p : pieces) {
    FERRY_RETURN_IF_ERROR(CheckTensor(p.tensor));
    FERRY_RETURN_IF_ERROR(CheckAddable(layout, p.tensor));
    const std::string piece = what + ": piece " + p.box.ToString() + " of '" + p.tensor.name + "'";
    if (p.tensor.dtype != dtype) {
      return InvalidArgument(piece + " has dtype " + std::string(DTypeName(p.tensor.dtype)) +
                             ", the buffer holds " + std::string(DTypeName(dtype)));
    }
    if (p.box.ndim != ndim || static_cast<int>(p.tensor.shape.size()) != ndim) {
      return InvalidArgument(piece + " does not have " + std::to_string(ndim) + " dims");
    }
    if (!Box::FromShape(p.tensor.shape).Contains(p.box)) {
      return InvalidArgument(piece + " lies outside the tensor's shape " +
                             FormatInts(p.tensor.shape));
    }
    for (int d = 0; d < ndim; ++d) {
      if (d != concat_dim && p.box.Extent(d) != fused_shape[d]) {
        return InvalidArgument(piece + " has extent " + std::to_string(p.box.Extent(d)) +
                               " in dim " + std::to_string(d) + " but the first piece has " +
                               std::to_string(fused_shape[d]));
      }
    }
    fused_shape[concat_dim] += p.box.Extent(concat_dim);
  }
  std::vector<int> ids;
  for (const FusedPiece& p : pieces) {
    FERRY_ASSIGN_OR_RETURN(int id, layout.AddTensor(p.tensor));
    ids.push_back(id);
  }
  const auto strides = RowMajorStrides(fused_shape);
  const int64_t elem = DTypeSize(dtype);
  int64_t at = 0;  // position along concat_dim
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Box& box = pieces[i].box;
    if (!box.Empty()) {
      layout.PlaceFragment(ids[i], box, rank, buffer_name,
                           base_offset + at * strides[concat_dim] * elem, strides);
    }
    at += box.Extent(concat_dim);
  }
  int64_t fused_elements = 1;
  for (int64_t s : fused_shape) fused_elements *= s;
  const int b = layout.GetOrAddBuffer(rank, buffer_name);
  layout.buffers.GrowBytes(static_cast<size_t>(b), base_offset + fused_elements * elem);
  return Status::Ok();
}

Status AddMegatronQkvInterleaved(Layout& layout, const TensorSpec& q, const TensorSpec& k,
                                 const TensorSpec& v, int num_heads, int num_groups,
                                 int64_t head_dim, const std::vector<int>& tp_ranks,
                                 const std::string& buffer_name) {
  const std::string what = "Megatron QKV buffer '" + buffer_name + "'";
  if (buffer_name.empty()) return InvalidArgument("Megatron QKV buffer needs a name");
  for (const TensorSpec* t : {&q, &k, &v}) FERRY_RETURN_IF_ERROR(CheckTensor(*t));
  FERRY_RETURN_IF_ERROR(CheckRanks(tp_ranks, what));
  const int tp = static_cast<int>(tp_ranks.size());
  if (num_heads < 1 || num_groups < 1 || head_dim < 1 || num_heads % num_groups != 0) {
    return InvalidArgument(what + ": " + std::to_string(num_heads) + " heads in " +
                           std::to_string(num_groups) + " query groups of head_dim " +
                           std::to_string(head_dim) + " (heads must be a multiple of groups)");
  }
  if (num_groups % tp != 0) {
    return InvalidArgument(what + ": " + std::to_string(num_groups) +
                           " query groups do not split evenly over tensor-parallel size " +
                           std::to_string(tp));
  }
  if (q.dtype != k.dtype || q.dtype != v.dtype) {
    return InvalidArgument(what + ": q, k and v must share one dtype");
  }
  auto expect_shape = [&](const TensorSpec& t, int64_t rows) -> Status {
    std::vector<int64_t> want = q.shape;
    want[0] = rows;
    if (t.shape != want) {
      return InvalidArgument(what + ": tensor '" + t.name + "' has shape " + FormatInts(t.shape) +
                             ", expected " + FormatInts(want));
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(expect_shape(q, num_heads * head_dim));
  FERRY_RETURN_IF_ERROR(expect_shape(k, num_groups * head_dim));
  FERRY_RETURN_IF_ERROR(expect_shape(v, num_groups * head_dim));
  for (const TensorSpec* t : {&q, &k, &v}) FERRY_RETURN_IF_ERROR(CheckAddable(layout, *t));
  FERRY_ASSIGN_OR_RETURN(int qi, layout.AddTensor(q));
  FERRY_ASSIGN_OR_RETURN(int ki, layout.AddTensor(k));
  FERRY_ASSIGN_OR_RETURN(int vi, layout.AddTensor(v));

  const int64_t heads_per_group = num_heads / num_groups;
  const int64_t q_rows = heads_per_group * head_dim;  // q rows of one group
  const int64_t group_rows = q_rows + 2 * head_dim;   // [q | k | v] of one group
  const int groups_per_rank = num_groups / tp;
  std::vector<int64_t> buffer_shape = q.shape;
  buffer_shape[0] = groups_per_rank * group_rows;
  const auto strides = RowMajorStrides(buffer_shape);
  const int64_t row_bytes = strides[0] * DTypeSize(q.dtype);
  for (int i = 0; i < tp; ++i) {
    const int rank = tp_ranks[i];
    const int b = layout.GetOrAddBuffer(rank, buffer_name);
    const int64_t base = layout.buffers[b].bytes;
    for (int j = 0; j < groups_per_rank; ++j) {
      const int64_t g = static_cast<int64_t>(i) * groups_per_rank + j;
      const int64_t row0 = j * group_rows;
      Box qb = Box::FromShape(q.shape);
      qb.lo[0] = g * q_rows;
      qb.hi[0] = (g + 1) * q_rows;
      Box kvb = Box::FromShape(k.shape);
      kvb.lo[0] = g * head_dim;
      kvb.hi[0] = (g + 1) * head_dim;
      layout.PlaceFragment(qi, qb, rank, buffer_name, base + row0 * row_bytes, strides);
      layout.PlaceFragment(ki, kvb, rank, buffer_name, base + (row0 + q_rows) * row_bytes, strides);
      layout.PlaceFragment(vi, kvb, rank, buffer_name,
                           base + (row0 + q_rows + head_dim) * row_bytes, strides);
    }
  }
  return Status::Ok();
}

}  // namespace ferry
