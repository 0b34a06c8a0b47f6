// The batched strided-copy kernel and the host wrappers of core/cuda/batched_copy.h.
//
// Each copy is viewed as rows: the innermost dimension is a row of `shape[ndim-1] * elem_size` bytes
// when that dimension is dense (stride == elem_size) in both source and destination; otherwise each
// element is a row. Rows move in words of 16 bytes when both row starts and the row length allow
// it, else 4 bytes, else single bytes. A block moves at most kWordsPerBlock words: one segment of a
// long row (its offsets computed once per block), or several whole short rows. Each thread loads
// all its words of the block before storing any, so many loads are in flight per thread. A block
// finds its copy in a per-block index uploaded with the descriptors: one load, where a search over
// the copies would be a chain of dependent loads before the first byte moves. A launch of a few
// copies (kInlineCopies) passes their descriptors in the kernel's parameters instead: no table to
// allocate and copy to the device first, which costs a small launch several times the kernel's own
// time on the GPU and on the launching thread.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/batched_copy.h"
#include "core/cuda/device_table.cuh"

namespace ferry::cuda {
namespace {

struct CopyDescriptor {
  const unsigned char* src;
  unsigned char* dst;
  int outer_dims;        // dims other than the row dim
  int vector_bytes;      // 16, 4 or 1
  int64_t words_per_row;
  int64_t num_rows;
  int64_t blocks_per_row;  // long rows: a block moves one segment of one row; else 0
  int64_t rows_per_block;  // short rows: a block moves whole rows; else 0
  int64_t shape[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t first_block;  // prefix sum of blocks over copies
};

// Small blocks, many resident per SM: a block's start (its copy's descriptor, then its first
// loads) is a chain of dependent memory accesses, and only other blocks' work hides it. At 128
// threads and at most 80 registers a thread, six blocks fit an SM.
constexpr int kThreads = 128;
constexpr int kUnroll = 8;  // words a thread moves per block, all loaded before any is stored
constexpr int kMinBlocksPerSm = 6;
constexpr int64_t kWordsPerBlock = kThreads * kUnroll;

__device__ inline void RowOffsets(const CopyDescriptor& d, int64_t row, int64_t* src_off,
                                  int64_t* dst_off) {
  if (d.outer_dims == 1) {  // a matrix: no division
    *src_off = row * d.src_strides[0];
    *dst_off = row * d.dst_strides[0];
    return;
  }
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

// One segment of a row: `words` (at most kWordsPerBlock) consecutive words.
template <typename Word>
__device__ inline void CopySegment(const unsigned char* src, unsigned char* dst, int words) {
  const Word* from = reinterpret_cast<const Word*>(src);
  Word* to = reinterpret_cast<Word*>(dst);
  Word v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int w = threadIdx.x + u * kThreads;
    if (w < words) v[u] = from[w];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int w = threadIdx.x + u * kThreads;
    if (w < words) to[w] = v[u];
  }
}

// Whole rows `first_row` .. `first_row + rows - 1`, together at most kWordsPerBlock words.
template <typename Word>
__device__ inline void CopyRows(const CopyDescriptor& d, int64_t first_row, int rows) {
  const unsigned words_per_row = static_cast<unsigned>(d.words_per_row);
  const unsigned total = static_cast<unsigned>(rows) * words_per_row;
  Word v[kUnroll];
  Word* to[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const unsigned i = threadIdx.x + u * kThreads;
    if (i >= total) continue;
    const unsigned r = i / words_per_row;
    const unsigned w = i - r * words_per_row;
    int64_t src_off, dst_off;
    RowOffsets(d, first_row + r, &src_off, &dst_off);
    v[u] = reinterpret_cast<const Word*>(d.src + src_off)[w];
    to[u] = reinterpret_cast<Word*>(d.dst + dst_off) + w;
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (threadIdx.x + u * kThreads < total) *to[u] = v[u];
  }
}

template <typename Word>
__device__ inline void CopyBlock(const CopyDescriptor& d, int64_t local_block) {
  if (d.blocks_per_row > 0) {
    const int64_t row = local_block / d.blocks_per_row;
    const int64_t begin = (local_block - row * d.blocks_per_row) * kWordsPerBlock;
    int64_t src_off, dst_off;
    RowOffsets(d, row, &src_off, &dst_off);
    const int64_t byte = begin * static_cast<int64_t>(sizeof(Word));
    CopySegment<Word>(d.src + src_off + byte, d.dst + dst_off + byte,
                      static_cast<int>(min(kWordsPerBlock, d.words_per_row - begin)));
    return;
  }
  const int64_t first_row = local_block * d.rows_per_block;
  CopyRows<Word>(d, first_row, static_cast<int>(min(d.rows_per_block, d.num_rows - first_row)));
}

// Block `block` of the launch, which moves part of copy `d`, in `d`'s word size.
__device__ inline void CopyBlockOf(const CopyDescriptor& d, int64_t block) {
  const int64_t local_block = block - d.first_block;
  if (d.vector_bytes == 16) {
    CopyBlock<uint4>(d, local_block);
  } else if (d.vector_bytes == 4) {
    CopyBlock<uint32_t>(d, local_block);
  } else {
    CopyBlock<unsigned char>(d, local_block);
  }
}

// `block_copy[b]` is the copy that block b moves part of.
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
BatchedCopyKernel(const CopyDescriptor* descriptors, const int32_t* block_copy) {
  CopyBlockOf(descriptors[block_copy[blockIdx.x]], blockIdx.x);
}

// The tables of one LaunchTogether, in the launch's parameters: table t's blocks are the launch's
// blocks [first_block[t], first_block[t + 1]).
struct TableSet {
  const CopyDescriptor* descriptors[CopyTable::kMaxTablesPerLaunch];
  const int32_t* block_copy[CopyTable::kMaxTablesPerLaunch];
  int64_t first_block[CopyTable::kMaxTablesPerLaunch + 1];
  int count;
};
static_assert(sizeof(TableSet) <= 4096, "kernel parameters are limited to 4 KiB");

// A block finds its table by binary search over the parameters, then moves its part of a copy as
// BatchedCopyKernel does within that table.
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
TableSetCopyKernel(const __grid_constant__ TableSet set) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = set.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (set.first_block[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t local = block - set.first_block[lo];
  CopyBlockOf(set.descriptors[lo][set.block_copy[lo][local]], local);
}

// Up to this many copies travel in the launch's parameters, which hold 4 KiB on every CUDA version.
constexpr int kInlineCopies = 15;
struct InlineCopies {
  CopyDescriptor copies[kInlineCopies];
  int count;
};
static_assert(sizeof(InlineCopies) <= 4096, "kernel parameters are limited to 4 KiB");

// The copies in the parameters (read in place: __grid_constant__); a block's thread 0 finds its
// copy, the last whose first block is not after it, and shares the descriptor.
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
InlineBatchedCopyKernel(const __grid_constant__ InlineCopies inline_copies) {
  __shared__ CopyDescriptor d;
  if (threadIdx.x == 0) {
    int c = inline_copies.count - 1;
    while (c > 0 && inline_copies.copies[c].first_block > static_cast<int64_t>(blockIdx.x)) --c;
    d = inline_copies.copies[c];
  }
  __syncthreads();
  CopyBlockOf(d, blockIdx.x);
}

// Largest of 16/4/1 dividing `row_bytes` and every row's start address in both buffers.
int VectorBytes(const CopyDescriptor& d, int64_t row_bytes) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(d.src) | reinterpret_cast<uintptr_t>(d.dst) |
                   static_cast<uintptr_t>(row_bytes);
  for (int dim = 0; dim < d.outer_dims; ++dim) {
    if (d.shape[dim] > 1) {
      bits |= static_cast<uintptr_t>(d.src_strides[dim]) | static_cast<uintptr_t>(d.dst_strides[dim]);
    }
  }
  if ((bits & 15) == 0) return 16;
  if ((bits & 3) == 0) return 4;
  return 1;
}

// The kernel's view of one copy: rows of the innermost dimension when it is dense on both sides,
// else rows of one element; a block per segment of kWordsPerBlock words of a long row, or per
// run of whole short rows.
CopyDescriptor Describe(const StridedCopy& c) {
  CopyDescriptor d{};
  d.src = static_cast<const unsigned char*>(c.src);
  d.dst = static_cast<unsigned char*>(c.dst);
  const int last = c.ndim - 1;
  const bool dense_rows = c.src_strides[last] == c.elem_size && c.dst_strides[last] == c.elem_size;
  d.outer_dims = dense_rows ? last : c.ndim;
  const int64_t row_bytes = dense_rows ? c.shape[last] * c.elem_size : c.elem_size;
  d.num_rows = 1;
  for (int dim = 0; dim < d.outer_dims; ++dim) {
    d.shape[dim] = c.shape[dim];
    d.src_strides[dim] = c.src_strides[dim];
    d.dst_strides[dim] = c.dst_strides[dim];
    d.num_rows *= c.shape[dim];
  }
  d.vector_bytes = VectorBytes(d, row_bytes);
  d.words_per_row = row_bytes / d.vector_bytes;
  if (d.words_per_row >= kWordsPerBlock / 2) {
    d.blocks_per_row = (d.words_per_row + kWordsPerBlock - 1) / kWordsPerBlock;
  } else {
    d.rows_per_block = kWordsPerBlock / d.words_per_row;
  }
  return d;
}

// Blocks the kernel spends on `d`.
int64_t Blocks(const CopyDescriptor& d) {
  if (d.blocks_per_row > 0) return d.num_rows * d.blocks_per_row;
  return (d.num_rows + d.rows_per_block - 1) / d.rows_per_block;
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

namespace {

// The kernel's descriptors of `copies` (empty ones left out), each with its first block, and the
// launch's blocks in all. Fails on a bad copy or a launch over the grid's limit.
Result<std::vector<CopyDescriptor>> DescribeAll(const std::vector<StridedCopy>& copies, int64_t& blocks) {
  std::vector<CopyDescriptor> descriptors;
  descriptors.reserve(copies.size());
  blocks = 0;
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
    blocks += Blocks(d);
  }
  if (blocks > 0x7fffffff) return InvalidArgument("batched copy too large for one launch");
  return descriptors;
}

}  // namespace

Result<std::unique_ptr<CopyTable>> CopyTable::Upload(const std::vector<StridedCopy>& copies,
                                                     void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int64_t blocks = 0;
  FERRY_ASSIGN_OR_RETURN(std::vector<CopyDescriptor> descriptors, DescribeAll(copies, blocks));
  std::vector<int32_t> block_copy(static_cast<size_t>(blocks));
  for (size_t c = 0; c < descriptors.size(); ++c) {
    const int64_t end = descriptors[c].first_block + Blocks(descriptors[c]);
    for (int64_t b = descriptors[c].first_block; b < end; ++b) {
      block_copy[static_cast<size_t>(b)] = static_cast<int32_t>(c);
    }
  }
  void* table = nullptr;
  if (!descriptors.empty()) {
    // The descriptors, then the block index, in one allocation.
    FERRY_ASSIGN_OR_RETURN(table, UploadTable({std::as_bytes(std::span(descriptors)),
                                               std::as_bytes(std::span(block_copy))},
                                              stream, "copy descriptors"));
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
      static_cast<const CopyDescriptor*>(table_),
      reinterpret_cast<const int32_t*>(static_cast<const CopyDescriptor*>(table_) + count_));
  return CudaStatus(cudaGetLastError(), "BatchedCopyKernel launch");
}

Status CopyTable::LaunchTogether(std::span<const CopyTable* const> tables) {
  TableSet set{};
  return LaunchInGroups<CopyTable>(
      tables, &CopyTable::copies, kMaxTablesPerLaunch, "CopyTable::LaunchTogether",
      [&set](const CopyTable& t) {
        const auto* descriptors = static_cast<const CopyDescriptor*>(t.table_);
        set.descriptors[set.count] = descriptors;
        set.block_copy[set.count] = reinterpret_cast<const int32_t*>(descriptors + t.count_);
        set.first_block[set.count + 1] = set.first_block[set.count] + t.blocks_;
        ++set.count;
      },
      [&set](void* stream) -> Status {
        const int64_t blocks = set.first_block[set.count];
        if (blocks > 0x7fffffff) return InvalidArgument("batched copies too large for one launch");
        TableSetCopyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(set);
        set = TableSet{};
        return CudaStatus(cudaGetLastError(), "TableSetCopyKernel launch");
      });
}

Status LaunchBatchedCopy(const std::vector<StridedCopy>& copies, void* stream) {
  if (copies.size() > static_cast<size_t>(kInlineCopies)) {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CopyTable> table, CopyTable::Upload(copies, stream));
    return table->Launch();  // the table's memory is freed after the kernel, in stream order
  }
  int64_t blocks = 0;
  FERRY_ASSIGN_OR_RETURN(std::vector<CopyDescriptor> descriptors, DescribeAll(copies, blocks));
  if (descriptors.empty()) return Status::Ok();
  InlineCopies inline_copies{};
  std::copy(descriptors.begin(), descriptors.end(), inline_copies.copies);
  inline_copies.count = static_cast<int>(descriptors.size());
  InlineBatchedCopyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      inline_copies);
  return CudaStatus(cudaGetLastError(), "InlineBatchedCopyKernel launch");
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

Status CopyDeviceToDevice2DAsync(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                                 int64_t width, int64_t height, void* stream) {
  return CudaStatus(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                      cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
                    "cudaMemcpy2DAsync D2D");
}

}  // namespace ferry::cuda
