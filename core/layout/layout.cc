// Layout construction helpers and summaries.
#include "core/layout/layout.h"

#include <algorithm>
#include <set>

#include "core/base/checked_math.h"

namespace ferry {

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape) n = SatMul(n, s);  // saturates on hostile shapes (validation refuses)
  return n;
}

int64_t TensorSpec::NumBytes() const { return SatMul(NumElements(), DTypeSize(dtype)); }

std::array<int64_t, kMaxDims> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::array<int64_t, kMaxDims> strides{};
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride = SatMul(stride, std::max<int64_t>(shape[d], 1));
  }
  return strides;
}

std::string Layout::BufferKey(int rank, const std::string& name) {
  return std::to_string(rank) + '\n' + name;
}

// An index is trusted only while it covers a prefix of the vector whose last entry still maps to
// its position; a shrink or a replaced last entry (clear-and-refill) forces a rebuild.
void Layout::SyncIndexes() {
  auto tensor_prefix_ok = [&] {
    if (tensors.size() < tensors_indexed_) return false;
    if (tensors_indexed_ == 0) return true;
    auto it = tensor_index_.find(tensors[tensors_indexed_ - 1].name);
    return it != tensor_index_.end() && it->second == static_cast<int>(tensors_indexed_ - 1);
  };
  if (!tensor_prefix_ok()) {
    tensor_index_.clear();
    tensors_indexed_ = 0;
  }
  for (; tensors_indexed_ < tensors.size(); ++tensors_indexed_) {
    tensor_index_.emplace(tensors[tensors_indexed_].name, static_cast<int>(tensors_indexed_));
  }
  auto buffer_prefix_ok = [&] {
    if (buffers.size() < buffers_indexed_) return false;
    if (buffers_indexed_ == 0) return true;
    const BufferSpec& b = buffers[buffers_indexed_ - 1];
    auto it = buffer_index_.find(BufferKey(b.rank, b.name));
    return it != buffer_index_.end() && it->second == static_cast<int>(buffers_indexed_ - 1);
  };
  if (!buffer_prefix_ok()) {
    buffer_index_.clear();
    buffers_indexed_ = 0;
  }
  for (; buffers_indexed_ < buffers.size(); ++buffers_indexed_) {
    const BufferSpec& b = buffers[buffers_indexed_];
    buffer_index_.emplace(BufferKey(b.rank, b.name), static_cast<int>(buffers_indexed_));
  }
}

Result<int> Layout::AddTensor(const TensorSpec& spec) {
  SyncIndexes();
  int existing = FindTensor(spec.name);
  if (existing >= 0) {
    const TensorSpec& t = tensors[existing];
    if (t.shape != spec.shape || t.dtype != spec.dtype) {
      return InvalidArgument("tensor '" + spec.name + "' added twice with different shape or dtype");
    }
    return existing;
  }
  tensors.push_back(spec);
  SyncIndexes();
  return static_cast<int>(tensors.size()) - 1;
}

int Layout::FindTensor(const std::string& name) const {
  const bool fresh =
      tensors_indexed_ == tensors.size() &&
      (tensors.empty() || [&] {
        auto last = tensor_index_.find(tensors.back().name);
        return last != tensor_index_.end() && last->second == static_cast<int>(tensors.size()) - 1;
      }());
  if (fresh) {
    auto it = tensor_index_.find(name);
    if (it == tensor_index_.end()) return -1;
    if (it->second < static_cast<int>(tensors.size()) && tensors[it->second].name == name) {
      return it->second;
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool Layout::TensorNamesKnownDistinct() const {
  if (tensors_indexed_ != tensors.size() || tensor_index_.size() != tensors.size()) return false;
  if (tensors.empty()) return true;
  auto last = tensor_index_.find(tensors.back().name);
  return last != tensor_index_.end() && last->second == static_cast<int>(tensors.size()) - 1;
}

int Layout::FindBuffer(int rank, const std::string& name) const {
  const bool fresh =
      buffers_indexed_ == buffers.size() &&
      (buffers.empty() || [&] {
        auto last = buffer_index_.find(BufferKey(buffers.back().rank, buffers.back().name));
        return last != buffer_index_.end() && last->second == static_cast<int>(buffers.size()) - 1;
      }());
  if (fresh) {
    auto it = buffer_index_.find(BufferKey(rank, name));
    if (it == buffer_index_.end()) return -1;
    if (it->second < static_cast<int>(buffers.size()) && buffers[it->second].rank == rank &&
        buffers[it->second].name == name) {
      return it->second;
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].rank == rank && buffers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Layout::GetOrAddBuffer(int rank, const std::string& name) {
  SyncIndexes();
  int b = FindBuffer(rank, name);
  if (b >= 0) return b;
  buffers.push_back({rank, name, 0});
  SyncIndexes();
  return static_cast<int>(buffers.size()) - 1;
}

int Layout::AppendFragment(int tensor, const Box& box, int rank, const std::string& buffer_name) {
  int b = GetOrAddBuffer(rank, buffer_name);
  return PlaceFragment(tensor, box, rank, buffer_name, buffers[b].bytes,
                       RowMajorStrides(box.Shape()));
}

int Layout::PlaceFragment(int tensor, const Box& box, int rank, const std::string& buffer_name,
                          int64_t byte_offset, const std::array<int64_t, kMaxDims>& strides) {
  int b = GetOrAddBuffer(rank, buffer_name);
  Fragment f;
  f.tensor = tensor;
  f.box = box;
  f.loc.rank = rank;
  f.loc.buffer = b;
  f.loc.byte_offset = byte_offset;
  f.loc.strides = strides;
  fragments.push_back(f);
  auto [offset, length] = FragmentSpan(f);
  buffers.GrowBytes(static_cast<size_t>(b), SatAdd(offset, length));
  return static_cast<int>(fragments.size()) - 1;
}

std::vector<int> Layout::Ranks() const {
  std::set<int> ranks;
  for (const BufferSpec& b : buffers) ranks.insert(b.rank);
  return {ranks.begin(), ranks.end()};
}

std::map<int, int64_t> Layout::BytesPerRank() const {
  std::map<int, int64_t> bytes;
  for (const BufferSpec& b : buffers) bytes[b.rank] += 0;
  for (const Fragment& f : fragments) {
    bytes[f.loc.rank] += f.box.Volume() * DTypeSize(tensors[f.tensor].dtype);
  }
  return bytes;
}

int64_t Layout::FragmentBytes() const {
  int64_t total = 0;
  for (const Fragment& f : fragments) total += f.box.Volume() * DTypeSize(tensors[f.tensor].dtype);
  return total;
}

int64_t Layout::LogicalBytes() const {
  int64_t total = 0;
  for (const TensorSpec& t : tensors) total += t.NumBytes();
  return total;
}

std::pair<int64_t, int64_t> Layout::FragmentSpan(const Fragment& f) const {
  return FragmentSpan(f, tensors[f.tensor].dtype);
}

std::pair<int64_t, int64_t> Layout::FragmentSpan(const Fragment& f, DType stored) const {
  const int64_t elem = DTypeSize(stored);
  if (f.box.Empty()) return {f.loc.byte_offset, 0};
  // Saturating: a hostile fragment's span pins at kSaturated, which validation refuses.
  int64_t last = 0;
  for (int d = 0; d < f.box.ndim; ++d) {
    last = SatAdd(last, SatMul(f.box.Extent(d) - 1, f.loc.strides[d]));
  }
  return {f.loc.byte_offset, SatMul(SatAdd(last, 1), elem)};
}

std::vector<char> BlockScaledTensorMask(const Layout& layout) {
  std::vector<char> tensors(layout.tensors.size(), 0);
  if (layout.block_scaled.empty()) return tensors;
  std::vector<char> scaled(layout.buffers.size(), 0);
  for (const BlockScaledBuffer& s : layout.block_scaled) {
    if (s.buffer >= 0 && static_cast<size_t>(s.buffer) < scaled.size()) scaled[static_cast<size_t>(s.buffer)] = 1;
  }
  for (const Fragment& f : layout.fragments) {
    if (f.loc.buffer >= 0 && static_cast<size_t>(f.loc.buffer) < scaled.size() &&
        scaled[static_cast<size_t>(f.loc.buffer)] && f.tensor >= 0 &&
        static_cast<size_t>(f.tensor) < tensors.size()) {
      tensors[static_cast<size_t>(f.tensor)] = 1;
    }
  }
  return tensors;
}

std::vector<DType> StoredDTypes(const Layout& layout) {
  std::vector<DType> dtypes(layout.tensors.size());
  for (size_t t = 0; t < dtypes.size(); ++t) dtypes[t] = layout.tensors[t].dtype;
  for (const StoredTransform& x : layout.transforms) {
    if (x.tensor >= 0 && static_cast<size_t>(x.tensor) < dtypes.size()) dtypes[static_cast<size_t>(x.tensor)] = x.stored_dtype;
  }
  return dtypes;
}

Status CheckNoStoredTransforms(const Layout& source, const Layout& destination) {
  for (const Layout* l : {&destination, &source}) {
    if (l->transforms.empty()) continue;
    const StoredTransform& t = l->transforms.front();
    const std::string name = t.tensor >= 0 && t.tensor < static_cast<int>(l->tensors.size())
                                 ? l->tensors[t.tensor].name
                                 : "#" + std::to_string(t.tensor);
    const bool dst = l == &destination;
    return InvalidArgument(
        std::string(dst ? "destination" : "source") + " tensor '" + name + "' is stored as " +
        t.transform + " (" + std::string(DTypeName(t.stored_dtype)) + "), not as the checkpoint holds it: a " +
        (dst ? "raw copy into it" : "raw copy out of it") +
        " would give values of another meaning, and ferry has no op for this transform");
  }
  return Status::Ok();
}

}  // namespace ferry
