// Fragment checksums of the refit test pattern: descriptors, comparison, the device check.
#include "tools/cli/pattern_checksum.h"

#include <cstdio>

#include "core/base/dtype.h"
#include "core/cuda/box_checksum.h"

namespace ferry::cli {
namespace {

std::string Hex64(uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

Result<std::vector<cuda::StridedCopy>> FragmentBoxes(const Layout& layout, const RankBuffers& buffers) {
  if (buffers.buffers.size() != layout.buffers.size()) {
    return InvalidArgument("fragment boxes: " + std::to_string(buffers.buffers.size()) +
                           " buffer pointers for a layout of " + std::to_string(layout.buffers.size()) + " buffers");
  }
  std::vector<cuda::StridedCopy> boxes;
  const std::vector<StoredForm> forms = StoredForms(layout);
  for (const Fragment& f : layout.fragments) {
    if (f.loc.rank != buffers.rank) continue;
    const TensorSpec& t = layout.tensors[f.tensor];
    const int ndim = static_cast<int>(t.shape.size());
    if (ndim < 1 || ndim > cuda::kMaxCopyDims) {
      return InvalidArgument("fragment boxes: tensor '" + t.name + "' has " + std::to_string(ndim) +
                             " dims (1 to " + std::to_string(cuda::kMaxCopyDims) + ")");
    }
    if (buffers.buffers[f.loc.buffer] == nullptr) {
      return InvalidArgument("fragment boxes: buffer '" + layout.buffers[f.loc.buffer].name + "' of rank " +
                             std::to_string(buffers.rank) + " has no memory");
    }
    cuda::StridedCopy box;
    box.src = buffers.buffers[f.loc.buffer] + f.loc.byte_offset;
    box.ndim = ndim;
    box.elem_size = DTypeSize(forms[static_cast<size_t>(f.tensor)].dtype);
    for (int d = 0; d < ndim; ++d) {
      box.shape[d] = f.box.hi[d] - f.box.lo[d];
      box.src_strides[d] = f.loc.strides[d] * box.elem_size;
    }
    boxes.push_back(box);
  }
  return boxes;
}

Result<std::vector<PatternBox>> FragmentPatternBoxes(const Layout& layout, int rank, const Layout* source) {
  std::vector<PatternBox> boxes;
  const std::vector<StoredForm> forms = StoredForms(layout);
  for (const Fragment& f : layout.fragments) {
    if (f.loc.rank != rank) continue;
    const TensorSpec& t = layout.tensors[f.tensor];
    const int ndim = static_cast<int>(t.shape.size());
    if (ndim < 1 || ndim > cuda::kMaxCopyDims) {
      return InvalidArgument("pattern boxes: tensor '" + t.name + "' has " + std::to_string(ndim) + " dims");
    }
    PatternBox box;
    box.seed = PatternSeed(t.name);
    box.to = forms[static_cast<size_t>(f.tensor)].dtype;
    box.fn = forms[static_cast<size_t>(f.tensor)].fn;
    box.from = PatternDType(t, source);
    box.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      box.shape[d] = f.box.hi[d] - f.box.lo[d];
      box.index_strides[d] = stride;
      box.first_index += f.box.lo[d] * stride;
      stride *= t.shape[d];
    }
    boxes.push_back(box);
  }
  return boxes;
}

Status CompareFragmentChecksums(const Layout& layout, int rank, const std::vector<uint64_t>& expected,
                                const std::vector<uint64_t>& actual) {
  if (expected.size() != actual.size()) {
    return InvalidArgument("verify: rank " + std::to_string(rank) + ": " + std::to_string(actual.size()) +
                           " fragment checksums for " + std::to_string(expected.size()) + " fragments");
  }
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != actual[i] && differ++ == 0) first = static_cast<int64_t>(i);
  }
  if (differ == 0) return Status::Ok();
  int64_t seen = -1;
  for (const Fragment& f : layout.fragments) {
    if (f.loc.rank != rank || ++seen != first) continue;
    return Internal("verify: rank " + std::to_string(rank) + " buffer '" + layout.buffers[f.loc.buffer].name +
                    "' tensor '" + layout.tensors[f.tensor].name + "' fragment " + f.box.ToString() +
                    ": checksum " + Hex64(actual[first]) + ", the pattern's " + Hex64(expected[first]) + " (" +
                    std::to_string(differ) + " of " + std::to_string(expected.size()) +
                    " fragments of this rank differ)");
  }
  return Internal("verify: rank " + std::to_string(rank) + ": fragment checksum " + std::to_string(first) +
                  " has no fragment");
}

Result<int64_t> VerifyPatternOnDevice(const Layout& layout, const RankBuffers& device, const Layout* source) {
  FERRY_ASSIGN_OR_RETURN(std::vector<cuda::StridedCopy> boxes, FragmentBoxes(layout, device));
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> actual, cuda::BoxChecksums(boxes, nullptr));
  FERRY_ASSIGN_OR_RETURN(std::vector<PatternBox> pattern, FragmentPatternBoxes(layout, device.rank, source));
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> expected, PatternBoxChecksums(pattern));
  FERRY_RETURN_IF_ERROR(CompareFragmentChecksums(layout, device.rank, expected, actual));
  int64_t bytes = 0;
  for (const cuda::StridedCopy& box : boxes) {
    int64_t elements = 1;
    for (int d = 0; d < box.ndim; ++d) elements *= box.shape[d];
    bytes += elements * box.elem_size;
  }
  return bytes;
}

}  // namespace ferry::cli
