// The pattern's fragment checksums on the GPU: the generic box sum of core/cuda/box_sum.cuh with a
// term that generates each element's pattern bytes (tools/cli/pattern_word.h) from its global index
// instead of reading memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/base/checksum_term.h"
#include "core/cuda/box_sum.cuh"
#include "tools/cli/pattern_checksum_gpu.h"
#include "tools/cli/pattern_word.h"

namespace ferry::cli {
namespace {

struct PatternParams {
  uint64_t seed;
  uint64_t mask;
  DType from;
  DType to;
  ElementFn fn;
};

// The checksum term of the pattern element of global index `position` in box `d.box`.
struct PatternTerm {
  const PatternParams* params;  // device memory, one per box
  __device__ uint64_t operator()(const cuda::SumDescriptor& d, uint64_t e, int64_t position) const {
    const PatternParams p = params[d.box];
    return BoxChecksumTerm(e, PatternElement(p.seed, position, p.from, p.to, p.mask, p.fn));
  }
};

Status CheckPatternBox(const PatternBox& b, size_t i, int64_t* elements) {
  const std::string name = "pattern box " + std::to_string(i) + ": ";
  if (b.ndim < 1 || b.ndim > cuda::kMaxCopyDims) return InvalidArgument(name + std::to_string(b.ndim) + " dims");
  if (b.from != b.to && (!IsConvertibleFloat(b.from) || !IsConvertibleFloat(b.to))) {
    return InvalidArgument(name + "no conversion " + std::string(DTypeName(b.from)) + " -> " +
                           std::string(DTypeName(b.to)));
  }
  if (!ElementFnApplies(b.fn, b.from, b.to)) {
    return InvalidArgument(name + std::string(ElementFnName(b.fn)) + " does not apply from " +
                           std::string(DTypeName(b.from)) + " to " + std::string(DTypeName(b.to)));
  }
  *elements = 1;
  for (int d = 0; d < b.ndim; ++d) {
    if (b.shape[d] < 0) return InvalidArgument(name + "negative extent in dim " + std::to_string(d));
    *elements *= b.shape[d];
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<uint64_t>> PatternBoxChecksums(const std::vector<PatternBox>& boxes) {
  std::vector<cuda::SumDescriptor> descriptors;
  std::vector<PatternParams> params(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    const PatternBox& b = boxes[i];
    int64_t elements = 0;
    FERRY_RETURN_IF_ERROR(CheckPatternBox(b, i, &elements));
    params[i] = PatternParams{b.seed, ElementMask(b.to), b.from, b.to, b.fn};
    if (elements == 0) continue;
    cuda::SumDescriptor d{};
    d.base = b.first_index;
    d.ndim = b.ndim;
    std::copy_n(b.shape.begin(), b.ndim, d.shape);
    std::copy_n(b.index_strides.begin(), b.ndim, d.strides);
    d.elements = elements;
    d.box = static_cast<int>(i);
    descriptors.push_back(d);
  }
  if (descriptors.empty()) return std::vector<uint64_t>(boxes.size(), 0);
  PatternParams* table = nullptr;
  const size_t bytes = params.size() * sizeof(PatternParams);
  FERRY_RETURN_IF_ERROR(
      cuda::CudaCall(cudaMalloc(reinterpret_cast<void**>(&table), bytes), "cudaMalloc(pattern params)"));
  const Status copied =
      cuda::CudaCall(cudaMemcpy(table, params.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy(pattern params)");
  Result<std::vector<uint64_t>> sums =
      copied.ok() ? cuda::SumBoxes(std::move(descriptors), boxes.size(), PatternTerm{table}, nullptr)
                  : Result<std::vector<uint64_t>>(copied);
  const Status freed = cuda::CudaCall(cudaFree(table), "cudaFree(pattern params)");
  if (sums.ok() && !freed.ok()) return freed;
  return sums;
}

}  // namespace ferry::cli
