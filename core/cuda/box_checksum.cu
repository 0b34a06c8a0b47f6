// The box-checksum kernel's term and the host wrappers of core/cuda/box_checksum.h: the generic
// box sum of core/cuda/box_sum.cuh with a term that reads each element from device memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/base/checksum_term.h"
#include "core/cuda/box_checksum.h"
#include "core/cuda/box_sum.cuh"

namespace ferry::cuda {
namespace {

// The element at `p` as a little-endian unsigned integer of `size` bytes; typed loads when aligned.
__device__ inline uint64_t LoadElement(const unsigned char* p, int size) {
  if ((reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(size - 1)) == 0) {
    switch (size) {
      case 1: return *p;
      case 2: return *reinterpret_cast<const uint16_t*>(p);
      case 4: return *reinterpret_cast<const uint32_t*>(p);
      default: return *reinterpret_cast<const unsigned long long*>(p);
    }
  }
  uint64_t v = 0;
  for (int i = 0; i < size; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The checksum term of the element at byte address `position`.
struct MemoryTerm {
  __device__ uint64_t operator()(const SumDescriptor& d, uint64_t e, int64_t position) const {
    return BoxChecksumTerm(e, LoadElement(reinterpret_cast<const unsigned char*>(position), d.width));
  }
};

// Checks `box` (number `i`) and returns its element count.
Result<int64_t> CheckBox(const StridedCopy& box, size_t i) {
  const std::string name = "box checksum " + std::to_string(i) + ": ";
  if (box.ndim < 1 || box.ndim > kMaxCopyDims) {
    return InvalidArgument(name + std::to_string(box.ndim) + " dims (1 to " + std::to_string(kMaxCopyDims) + ")");
  }
  if (box.elem_size != 1 && box.elem_size != 2 && box.elem_size != 4 && box.elem_size != 8) {
    return InvalidArgument(name + "element of " + std::to_string(box.elem_size) + " bytes (1, 2, 4 or 8)");
  }
  int64_t elements = 1;
  for (int d = 0; d < box.ndim; ++d) {
    if (box.shape[d] < 0) return InvalidArgument(name + "negative extent in dim " + std::to_string(d));
    elements *= box.shape[d];
  }
  if (elements > 0 && box.src == nullptr) return InvalidArgument(name + "no memory");
  return elements;
}

// The descriptors of the non-empty boxes.
Result<std::vector<SumDescriptor>> Describe(const std::vector<StridedCopy>& boxes) {
  std::vector<SumDescriptor> out;
  for (size_t i = 0; i < boxes.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(int64_t elements, CheckBox(boxes[i], i));
    if (elements == 0) continue;
    SumDescriptor d{};
    d.base = reinterpret_cast<int64_t>(boxes[i].src);
    d.ndim = boxes[i].ndim;
    d.width = static_cast<int>(boxes[i].elem_size);
    std::copy_n(boxes[i].shape.begin(), d.ndim, d.shape);
    std::copy_n(boxes[i].src_strides.begin(), d.ndim, d.strides);
    d.elements = elements;
    d.box = static_cast<int>(i);
    out.push_back(d);
  }
  return out;
}

}  // namespace

Result<std::vector<uint64_t>> BoxChecksums(const std::vector<StridedCopy>& boxes, void* stream) {
  FERRY_ASSIGN_OR_RETURN(std::vector<SumDescriptor> descriptors, Describe(boxes));
  return SumBoxes(std::move(descriptors), boxes.size(), MemoryTerm{}, static_cast<cudaStream_t>(stream));
}

uint64_t HostBoxChecksum(const StridedCopy& box) {
  int64_t elements = 1;
  for (int d = 0; d < box.ndim; ++d) elements *= box.shape[d];
  const auto* base = static_cast<const unsigned char*>(box.src);
  uint64_t sum = 0;
  for (int64_t e = 0; e < elements; ++e) {
    int64_t rest = e, offset = 0;
    for (int d = box.ndim - 1; d >= 0; --d) {
      offset += (rest % box.shape[d]) * box.src_strides[d];
      rest /= box.shape[d];
    }
    uint64_t value = 0;
    for (int64_t b = 0; b < box.elem_size; ++b) value |= static_cast<uint64_t>(base[offset + b]) << (8 * b);
    sum += BoxChecksumTerm(static_cast<uint64_t>(e), value);
  }
  return sum;
}

}  // namespace ferry::cuda
