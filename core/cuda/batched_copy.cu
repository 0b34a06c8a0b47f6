// The batched strided-copy kernel and the host wrappers of core/cuda/batched_copy.h.
//
// Each copy is viewed as rows: the innermost dimension is a row of `shape[ndim-1] * elem_size` bytes
// when that dimension is dense (stride == elem_size) in both source and destination; otherwise each
// element is a row. A grid-stride loop over (copy, row, 16-byte word) moves 16 bytes per thread and
// iteration when both row starts and the row length allow it, else 4 bytes, else single bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/batched_copy.h"

namespace ferry::cuda {
namespace {

struct CopyDescriptor {
  const unsigned char* src;
  unsigned char* dst;
  int outer_dims;      // dims other than the row dim
  int vector_bytes;    // 16, 4 or 1
  int64_t row_bytes;
  int64_t num_rows;
  int64_t shape[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t first_block;  // prefix sum of blocks over copies
};

constexpr int kThreads = 256;

__device__ inline void RowOffsets(const CopyDescriptor& d, int64_t row, int64_t* src_off,
                                  int64_t* dst_off) {
  int64_t s = 0, t = 0;
  for (int dim = d.outer_dims - 1; dim >= 0; --dim) {
    int64_t idx = row % d.shape[dim];
    row /= d.shape[dim];
    s += idx * d.src_strides[dim];
    t += idx * d.dst_strides[dim];
  }
  *src_off = s;
  *dst_off = t;
}

__global__ void BatchedCopyKernel(const CopyDescriptor* descriptors, int num_copies,
                                  int64_t words_per_block) {
  // Find this block's copy by binary search over first_block.
  int lo = 0, hi = num_copies - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  const CopyDescriptor& d = descriptors[lo];
  const int64_t local_block = block - d.first_block;
  const int64_t words_per_row = d.row_bytes / d.vector_bytes;
  const int64_t total_words = words_per_row * d.num_rows;
  const int64_t begin = local_block * words_per_block;
  const int64_t end = min(total_words, begin + words_per_block);
  for (int64_t w = begin + threadIdx.x; w < end; w += blockDim.x) {
    const int64_t row = w / words_per_row;
    const int64_t col = (w - row * words_per_row) * d.vector_bytes;
    int64_t src_off, dst_off;
    RowOffsets(d, row, &src_off, &dst_off);
    const unsigned char* s = d.src + src_off + col;
    unsigned char* t = d.dst + dst_off + col;
    if (d.vector_bytes == 16) {
      *reinterpret_cast<uint4*>(t) = *reinterpret_cast<const uint4*>(s);
    } else if (d.vector_bytes == 4) {
      *reinterpret_cast<uint32_t*>(t) = *reinterpret_cast<const uint32_t*>(s);
    } else {
      *t = *s;
    }
  }
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// Largest of 16/4/1 dividing the row length and every row's start address in both buffers.
int VectorBytes(const CopyDescriptor& d) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(d.src) | reinterpret_cast<uintptr_t>(d.dst) |
                   static_cast<uintptr_t>(d.row_bytes);
  for (int dim = 0; dim < d.outer_dims; ++dim) {
    if (d.shape[dim] > 1) {
      bits |= static_cast<uintptr_t>(d.src_strides[dim]) | static_cast<uintptr_t>(d.dst_strides[dim]);
    }
  }
  if ((bits & 15) == 0) return 16;
  if ((bits & 3) == 0) return 4;
  return 1;
}

constexpr int64_t kWordsPerBlock = kThreads * 8;

// The kernel's view of one copy: rows of the innermost dimension when it is dense on both sides,
// else rows of one element.
CopyDescriptor Describe(const StridedCopy& c) {
  CopyDescriptor d{};
  d.src = static_cast<const unsigned char*>(c.src);
  d.dst = static_cast<unsigned char*>(c.dst);
  const int last = c.ndim - 1;
  const bool dense_rows = c.src_strides[last] == c.elem_size && c.dst_strides[last] == c.elem_size;
  d.outer_dims = dense_rows ? last : c.ndim;
  d.row_bytes = dense_rows ? c.shape[last] * c.elem_size : c.elem_size;
  d.num_rows = 1;
  for (int dim = 0; dim < d.outer_dims; ++dim) {
    d.shape[dim] = c.shape[dim];
    d.src_strides[dim] = c.src_strides[dim];
    d.dst_strides[dim] = c.dst_strides[dim];
    d.num_rows *= c.shape[dim];
  }
  d.vector_bytes = VectorBytes(d);
  return d;
}

}  // namespace

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string DeviceName(int device) {
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
}

Result<std::unique_ptr<CopyTable>> CopyTable::Upload(const std::vector<StridedCopy>& copies,
                                                     void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<CopyDescriptor> descriptors;
  descriptors.reserve(copies.size());
  int64_t blocks = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    const StridedCopy& c = copies[i];
    if (c.ndim < 1 || c.ndim > kMaxCopyDims || c.elem_size <= 0) {
      return InvalidArgument("batched copy " + std::to_string(i) + ": bad ndim or element size");
    }
    int64_t elements = 1;
    for (int d = 0; d < c.ndim; ++d) elements *= c.shape[d];
    if (elements == 0) continue;
    descriptors.push_back(Describe(c));
    CopyDescriptor& d = descriptors.back();
    d.first_block = blocks;
    blocks += (d.num_rows * (d.row_bytes / d.vector_bytes) + kWordsPerBlock - 1) / kWordsPerBlock;
  }
  if (blocks > 0x7fffffff) return InvalidArgument("batched copy too large for one launch");
  CopyDescriptor* table = nullptr;
  if (!descriptors.empty()) {
    const size_t table_bytes = descriptors.size() * sizeof(CopyDescriptor);
    FERRY_RETURN_IF_ERROR(CudaStatus(
        cudaMallocAsync(reinterpret_cast<void**>(&table), table_bytes, stream),
        "cudaMallocAsync(copy descriptors)"));
    // From pageable host memory the copy is staged before cudaMemcpyAsync returns, so
    // `descriptors` may go out of scope.
    Status copied = CudaStatus(
        cudaMemcpyAsync(table, descriptors.data(), table_bytes, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(copy descriptors)");
    if (!copied.ok()) {
      cudaFreeAsync(table, stream);
      return copied;
    }
  }
  return std::unique_ptr<CopyTable>(
      new CopyTable(stream_ptr, table, static_cast<int64_t>(descriptors.size()), blocks));
}

CopyTable::~CopyTable() {
  if (table_ != nullptr) cudaFreeAsync(table_, static_cast<cudaStream_t>(stream_));
}

Status CopyTable::Launch() const {
  if (count_ == 0) return Status::Ok();
  BatchedCopyKernel<<<static_cast<unsigned>(blocks_), kThreads, 0,
                      static_cast<cudaStream_t>(stream_)>>>(
      static_cast<const CopyDescriptor*>(table_), static_cast<int>(count_), kWordsPerBlock);
  return CudaStatus(cudaGetLastError(), "BatchedCopyKernel launch");
}

Status LaunchBatchedCopy(const std::vector<StridedCopy>& copies, void* stream) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CopyTable> table, CopyTable::Upload(copies, stream));
  return table->Launch();  // the table's memory is freed after the kernel, in stream order
}

Status SynchronizeStream(void* stream) {
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

Result<void*> DeviceAlloc(int64_t bytes) {
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (err != cudaSuccess) return CudaStatus(err, "cudaMalloc");
  return ptr;
}

Status DeviceFree(void* ptr) { return CudaStatus(cudaFree(ptr), "cudaFree"); }

Status CopyToDevice(void* dst, const void* src, int64_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

Status CopyToHost(void* dst, const void* src, int64_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

Status CopyDeviceToDeviceAsync(void* dst, const void* src, int64_t bytes, void* stream) {
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(stream)),
                    "cudaMemcpyAsync D2D");
}

}  // namespace ferry::cuda
