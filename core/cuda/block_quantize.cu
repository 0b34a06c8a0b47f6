// The block-quantize kernel of core/cuda/block_quantize.h: a grid over (rectangle, 128x128 block),
// the rectangle of a CUDA block found by binary search over the rectangles' prefix sums of blocks.
// A job (a whole stack) is one rectangle per matrix. Two ways to walk a block, chosen per
// rectangle on the host:
//  * vector (source rows and destination 16-byte aligned, columns a multiple of 16, as a weight's
//    staging twin, most peers' tensors and the fp8 tensor are): with T threads, thread t loads 16
//    consecutive elements of column group t % 8 in every (T / 8)th row with 16-byte loads, keeps
//    the block's elements it owns in registers, reduces |x| by warp shuffles and shared memory,
//    then casts them, two a hardware cast, and stores 16 fp8 bytes at once (narrower stores leave
//    memory bandwidth unused: block_quantize_bench, docs/BENCHMARKS.md). The source is read once.
//    A 2-byte source's walk runs 512 threads capped at 32 registers (4 blocks an SM), fp32's 256.
//  * bytes (any other alignment: a staging slot may start at any byte): 256 threads, thread t
//    walks column t % 128 in every second row, loading each element byte by byte (LoadAsFloat),
//    and reads the block again to cast it.
// Both reduce |x| with NaN propagating (core/base/fp8_block.h Fp8BlockAmaxStep: the maximum does
// not depend on the order), thread 0 computes the block's parameters, threads 0..127 write the
// scale (one fp32 from thread 0, or each its weight row's packed E8M0 code,
// Fp8BlockWriteScaleRow), then every thread casts its elements with them (Fp8BlockParamsOf: UE8M0
// scales requantize each element in the same thread, no second reduction). The block's parameters
// and each element's cast are the host's own code (core/base/fp8_block.h), whose e4m3 cast is the
// hardware's in device code (cvt.rn.satfinite, which rounds and saturates as the host's
// FloatToSmall does; NaN is handled before it), so the bits equal the host path's
// (tests/core/cuda/block_quantize_test.cc checks them bit for bit, subnormals, infinities and NaN
// included).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <string>

#include "core/base/fp8_block.h"
#include "core/cuda/block_quantize.h"
#include "core/cuda/device_table.cuh"

namespace ferry::cuda {
namespace {

// One rectangle (BlockQuantizeRect) as the kernel reads it.
struct QuantizeDescriptor {
  const unsigned char* src;  // the rectangle's first element
  int64_t src_pitch;
  unsigned char* dst;        // the stack's e4m3 values
  unsigned char* scales;
  DType src_dtype;
  Fp8ScaleFormat scale_fmt;
  int64_t rows, cols, block_cols;  // the matrix's
  int64_t rect_cols;    // block columns of the rectangle
  int64_t row0, col0;   // the rectangle's first matrix row and column
  int64_t first_k;      // the rectangle's first block as the stack's scales number blocks
  int64_t dst_base;     // the rectangle's matrix's first element in `dst`
  int64_t first_block;  // prefix sum of 128x128 blocks over the launch's rectangles
};

constexpr int kBlock = static_cast<int>(kFp8BlockSize);
constexpr int kVector = 16;                         // elements a thread loads at once
constexpr int kGroups = kBlock / kVector;           // column groups of a block row

// Where a CUDA block's 128x128 block lies: its index k within the stack (as the scales number
// blocks), the element offset of its matrix and its first row and column in the matrix.
struct BlockPlace {
  int64_t k, base, r0, c0;
};

__device__ BlockPlace PlaceOf(const QuantizeDescriptor& d, int64_t block) {
  const int64_t i = block - d.first_block;
  const int64_t br = i / d.rect_cols, bc = i % d.rect_cols;
  return {d.first_k + br * d.block_cols + bc, d.dst_base, d.row0 + br * kBlock, d.col0 + bc * kBlock};
}

// The source of element (r, c) of the block's matrix, `elem` bytes an element.
__device__ const unsigned char* SourceOf(const QuantizeDescriptor& d, int64_t r, int64_t c, int elem) {
  return d.src + (r - d.row0) * d.src_pitch + (c - d.col0) * elem;
}

// The block's parameters from each thread's |x| maximum `amax`, every one of the kThreads threads
// of the block calling (Fp8BlockAmaxStep does not depend on the order of its steps, so any
// reduction gives the host's).
template <int kThreads>
__device__ Fp8BlockParams ReduceParams(float amax, Fp8ScaleFormat fmt) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float partial[kWarps];
  __shared__ Fp8BlockParams params;
  for (int lane = 16; lane > 0; lane /= 2) {
    amax = Fp8BlockAmaxStep(amax, __shfl_xor_sync(0xffffffffu, amax, lane));
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float block_amax = 0.0f;
    for (int w = 0; w < kWarps; ++w) block_amax = Fp8BlockAmaxStep(block_amax, partial[w]);
    params = Fp8BlockParamsOf(block_amax, fmt);
  }
  __syncthreads();
  return params;
}

// Element j of a group loaded as words: 2-byte elements pack two to a word, fp32 one.
template <DType kType>
__device__ float GroupElement(const uint32_t* words, int j) {
  if constexpr (kType == DType::kBF16) return BF16ToFloat(static_cast<uint16_t>(words[j / 2] >> (16 * (j % 2))));
  if constexpr (kType == DType::kFP16) return SmallToFloat(words[j / 2] >> (16 * (j % 2)) & 0xffffu, kHalfFormat);
  return BitsToFloat(words[j]);
}

// Fp8BlockQuantize of two elements, `lo` in the low byte, by one hardware cast: its NaN is the
// 0x7f Fp8BlockQuantize gives every NaN, and it rounds and saturates as FloatToE4m3.
__device__ uint32_t QuantizePair(float lo, float hi, float multiplier) {
  return __nv_cvt_float2_to_fp8x2(make_float2(Fp8BlockMul(lo, multiplier), Fp8BlockMul(hi, multiplier)),
                                  __NV_SATFINITE, __NV_E4M3);
}

// The vector walk of one block of source dtype `kType` by kThreads threads.
template <DType kType, int kThreads>
__device__ void QuantizeBlockVector(const QuantizeDescriptor& d, const BlockPlace& at) {
  constexpr int kRowStep = kThreads / kGroups;  // rows the threads cover per step
  constexpr int kSteps = kBlock / kRowStep;     // steps over a block's rows
  constexpr int elem = FloatBytes(kType);
  constexpr int kWords = kVector * elem / 4;  // words a group takes
  const int64_t c = at.c0 + threadIdx.x % kGroups * kVector;
  const int64_t r_first = at.r0 + threadIdx.x / kGroups;
  const bool column_in = c < d.cols;
  uint32_t words[kSteps][kWords];
  float amax = 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int64_t r = r_first + s * kRowStep;
    if (!column_in || r >= d.rows) continue;
    const uint4* p = reinterpret_cast<const uint4*>(SourceOf(d, r, c, elem));
#pragma unroll
    for (int q = 0; q < kWords / 4; ++q) {
      const uint4 v = p[q];
      words[s][4 * q] = v.x; words[s][4 * q + 1] = v.y; words[s][4 * q + 2] = v.z; words[s][4 * q + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < kVector; ++j) amax = Fp8BlockAmaxStep(amax, GroupElement<kType>(words[s], j));
  }
  const Fp8BlockParams params = ReduceParams<kThreads>(amax, d.scale_fmt);
  if (threadIdx.x < kBlock) {
    Fp8BlockWriteScaleRow(d.scales, d.scale_fmt, d.rows, d.cols, at.k, params.scale_inv, threadIdx.x);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int64_t r = r_first + s * kRowStep;
    if (!column_in || r >= d.rows) continue;
    uint32_t packed[kVector / 4] = {};
    if (!params.requantize) {
#pragma unroll
      for (int j = 0; j < kVector; j += 2) {
        packed[j / 4] |= QuantizePair(GroupElement<kType>(words[s], j), GroupElement<kType>(words[s], j + 1),
                                      params.multiplier) << (8 * (j % 4));
      }
    } else {
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        const uint32_t q = Fp8BlockQuantizeElement(GroupElement<kType>(words[s], j), params);
        packed[j / 4] |= q << (8 * (j % 4));
      }
    }
    *reinterpret_cast<uint4*>(d.dst + at.base + r * d.cols + c) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// The byte walk of one block by kThreads threads: any alignment, the block read twice.
template <int kThreads>
__device__ void QuantizeBlockBytes(const QuantizeDescriptor& d, const BlockPlace& at) {
  const int64_t r1 = min(d.rows, at.r0 + kBlock), c = at.c0 + threadIdx.x % kBlock;
  const int elem = FloatBytes(d.src_dtype);
  float amax = 0.0f;
  if (c < d.cols) {
    for (int64_t r = at.r0 + threadIdx.x / kBlock; r < r1; r += kThreads / kBlock) {
      amax = Fp8BlockAmaxStep(amax, LoadAsFloat(d.src_dtype, SourceOf(d, r, c, elem)));
    }
  }
  const Fp8BlockParams params = ReduceParams<kThreads>(amax, d.scale_fmt);
  if (threadIdx.x < kBlock) {
    Fp8BlockWriteScaleRow(d.scales, d.scale_fmt, d.rows, d.cols, at.k, params.scale_inv, threadIdx.x);
  }
  if (c >= d.cols) return;
  for (int64_t r = at.r0 + threadIdx.x / kBlock; r < r1; r += kThreads / kBlock) {
    d.dst[at.base + r * d.cols + c] = Fp8BlockQuantizeElement(LoadAsFloat(d.src_dtype, SourceOf(d, r, c, elem)), params);
  }
}

// How a launch walks its blocks: a kernel of its own each, so that each runs at the occupancy its
// registers allow (the fp32 vector walk holds twice the words of the 2-byte ones, the byte walk few).
enum class Walk { kVectorBF16, kVectorFP16, kVectorFP32, kBytes };
constexpr int kWalks = 4;

// Threads a CUDA block of a walk's kernel runs and blocks an SM should hold of it
// (__launch_bounds__). A 2-byte vector walk waits on memory, so occupancy pays: 512 threads, each
// holding 2 steps of a group (16 words), capped at 32 registers so that 4 blocks fill an SM; the
// byte walk does best with 256 threads, the fp32 vector walk's 64 words a thread keep it there.
__host__ __device__ constexpr bool TwoByteVector(Walk w) { return w == Walk::kVectorBF16 || w == Walk::kVectorFP16; }
__host__ __device__ constexpr int ThreadsOf(Walk w) { return TwoByteVector(w) ? 512 : 256; }
__host__ __device__ constexpr int MinBlocksOf(Walk w) { return TwoByteVector(w) ? 4 : 1; }

template <Walk kWalk>
__global__ void __launch_bounds__(ThreadsOf(kWalk), MinBlocksOf(kWalk))
    BlockQuantizeKernel(const QuantizeDescriptor* descriptors, int count) {
  int lo = 0, hi = count - 1;
  const int64_t block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descriptors[mid].first_block <= block) lo = mid; else hi = mid - 1;
  }
  // A copy in registers: the fp8 stores are byte stores, which could alias the table in memory.
  const QuantizeDescriptor d = descriptors[lo];
  const BlockPlace at = PlaceOf(d, block);
  constexpr int kThreads = ThreadsOf(kWalk);
  if constexpr (kWalk == Walk::kBytes) QuantizeBlockBytes<kThreads>(d, at);
  if constexpr (kWalk == Walk::kVectorBF16) QuantizeBlockVector<DType::kBF16, kThreads>(d, at);
  if constexpr (kWalk == Walk::kVectorFP16) QuantizeBlockVector<DType::kFP16, kThreads>(d, at);
  if constexpr (kWalk == Walk::kVectorFP32) QuantizeBlockVector<DType::kFP32, kThreads>(d, at);
}

// The walk of rectangle `b`: the vector walk of its dtype when 16-byte loads and stores stay
// aligned in every row and a group of kVector never crosses a row's end, else the byte walk.
Walk WalkOf(const BlockQuantizeRect& b) {
  const bool aligned = b.cols % kVector == 0 && reinterpret_cast<uintptr_t>(b.src) % 16 == 0 &&
                       b.src_pitch % 16 == 0 && reinterpret_cast<uintptr_t>(b.dst) % 16 == 0;
  if (!aligned) return Walk::kBytes;
  if (b.src_dtype == DType::kBF16) return Walk::kVectorBF16;
  return b.src_dtype == DType::kFP16 ? Walk::kVectorFP16 : Walk::kVectorFP32;
}

Status CheckFormat(const std::string& name, DType dtype, Fp8ScaleFormat fmt, const void* scales) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16 && dtype != DType::kFP32) {
    return InvalidArgument(name + ": no block quantization from " + std::string(DTypeName(dtype)));
  }
  if (fmt != Fp8ScaleFormat::kFloat32 && fmt != Fp8ScaleFormat::kUe8m0 &&
      fmt != Fp8ScaleFormat::kUe8m0Packed) {
    return InvalidArgument(name + ": unknown scale format");
  }
  if (reinterpret_cast<uintptr_t>(scales) % 4 != 0) {
    return InvalidArgument(name + ": scales not 4-byte aligned");
  }
  return Status::Ok();
}

// "[first, first + count) outside a matrix of `total` `what`", or empty when inside.
std::string OutsideOf(const char* what, int64_t first, int64_t count, int64_t total) {
  if (first >= 0 && count >= 0 && first + count <= total) return "";
  return std::string(what) + " [" + std::to_string(first) + ", " + std::to_string(first + count) +
         ") outside a matrix of " + std::to_string(total);
}

Status CheckRect(const BlockQuantizeRect& b, size_t i) {
  const std::string name = "block quantize rectangle " + std::to_string(i);
  FERRY_RETURN_IF_ERROR(CheckFormat(name, b.src_dtype, b.scale_fmt, b.scales));
  if (b.rows < 0 || b.cols < 0 || b.matrix < 0) return InvalidArgument(name + ": negative size");
  const int64_t block_rows = (b.rows + kBlock - 1) / kBlock, block_cols = (b.cols + kBlock - 1) / kBlock;
  for (const std::string& outside : {OutsideOf("block rows", b.block_row, b.block_rows, block_rows),
                                     OutsideOf("block columns", b.block_col, b.block_cols, block_cols)}) {
    if (!outside.empty()) return InvalidArgument(name + ": " + outside);
  }
  const int64_t width = std::min(b.cols, (b.block_col + b.block_cols) * kBlock) - b.block_col * kBlock;
  if (b.block_rows > 0 && b.block_cols > 0 && b.src_pitch < width * DTypeSize(b.src_dtype)) {
    return InvalidArgument(name + ": source pitch " + std::to_string(b.src_pitch) +
                           " bytes is shorter than its rows");
  }
  return Status::Ok();
}

// The rectangles of one walk as descriptors with their blocks' prefix sums.
struct Launch {
  std::vector<QuantizeDescriptor> descriptors;
  int64_t blocks = 0;

  void Add(const BlockQuantizeRect& b) {
    QuantizeDescriptor d{};
    d.src = static_cast<const unsigned char*>(b.src);
    d.src_pitch = b.src_pitch;
    d.dst = static_cast<unsigned char*>(b.dst);
    d.scales = static_cast<unsigned char*>(b.scales);
    d.src_dtype = b.src_dtype;
    d.scale_fmt = b.scale_fmt;
    d.rows = b.rows;
    d.cols = b.cols;
    d.block_cols = (b.cols + kBlock - 1) / kBlock;
    d.rect_cols = b.block_cols;
    d.row0 = b.block_row * kBlock;
    d.col0 = b.block_col * kBlock;
    d.first_k = (b.matrix * ((b.rows + kBlock - 1) / kBlock) + b.block_row) * d.block_cols + b.block_col;
    d.dst_base = b.matrix * b.rows * b.cols;
    const int64_t count = b.block_rows * b.block_cols;
    if (count == 0) return;
    d.first_block = blocks;
    blocks += count;
    descriptors.push_back(d);
  }
};

template <Walk kWalk>
Status LaunchWalk(const Launch& launch, const QuantizeDescriptor* table, cudaStream_t stream) {
  if (launch.descriptors.empty()) return Status::Ok();
  BlockQuantizeKernel<kWalk><<<static_cast<unsigned>(launch.blocks), ThreadsOf(kWalk), 0, stream>>>(
      table, static_cast<int>(launch.descriptors.size()));
  return CudaStatus(cudaGetLastError(), "BlockQuantizeKernel launch (walk " +
                                            std::to_string(static_cast<int>(kWalk)) + ")");
}

}  // namespace

bool BlockQuantizeVectorWalks(const BlockQuantizeRect& rect) { return WalkOf(rect) != Walk::kBytes; }

Status LaunchBlockQuantizeRects(const std::vector<BlockQuantizeRect>& rects, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::array<Launch, kWalks> walks;
  for (size_t i = 0; i < rects.size(); ++i) {
    FERRY_RETURN_IF_ERROR(CheckRect(rects[i], i));
    walks[static_cast<size_t>(WalkOf(rects[i]))].Add(rects[i]);
  }
  size_t count = 0;
  for (const Launch& w : walks) {
    if (w.blocks > 0x7fffffff) return InvalidArgument("block quantize too large for one launch");
    count += w.descriptors.size();
  }
  if (count == 0) return Status::Ok();
  std::vector<QuantizeDescriptor> all;
  all.reserve(count);
  for (const Launch& w : walks) all.insert(all.end(), w.descriptors.begin(), w.descriptors.end());
  FERRY_ASSIGN_OR_RETURN(void* table,
                         UploadTable({std::as_bytes(std::span(all))}, stream, "quantize descriptors"));
  // By Walk's value, as walks[] is indexed.
  constexpr std::array<Status (*)(const Launch&, const QuantizeDescriptor*, cudaStream_t), kWalks>
      kLaunchers = {&LaunchWalk<Walk::kVectorBF16>, &LaunchWalk<Walk::kVectorFP16>,
                    &LaunchWalk<Walk::kVectorFP32>, &LaunchWalk<Walk::kBytes>};
  const auto* at = static_cast<const QuantizeDescriptor*>(table);
  Status launched = Status::Ok();
  for (int w = 0; w < kWalks && launched.ok(); ++w) {
    launched = kLaunchers[static_cast<size_t>(w)](walks[static_cast<size_t>(w)], at, stream);
    at += walks[static_cast<size_t>(w)].descriptors.size();
  }
  const Status freed = CudaStatus(cudaFreeAsync(table, stream), "cudaFreeAsync(quantize descriptors)");
  return launched.ok() ? freed : launched;
}

// A job is one rectangle of every block per matrix, each matrix's rows dense after the previous's.
Status LaunchBlockQuantize(const std::vector<BlockQuantizeJob>& jobs, void* stream) {
  std::vector<BlockQuantizeRect> rects;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const BlockQuantizeJob& j = jobs[i];
    const std::string name = "block quantize job " + std::to_string(i);
    FERRY_RETURN_IF_ERROR(CheckFormat(name, j.src_dtype, j.scale_fmt, j.scales));
    if (j.matrices < 0 || j.rows < 0 || j.cols < 0) return InvalidArgument(name + ": negative size");
    const int64_t row_bytes = j.cols * DTypeSize(j.src_dtype);
    for (int64_t m = 0; m < j.matrices; ++m) {
      rects.push_back({static_cast<const char*>(j.src) + m * j.rows * row_bytes, row_bytes, j.dst,
                       j.scales, j.src_dtype, j.scale_fmt, j.rows, j.cols, m, 0,
                       (j.rows + kBlock - 1) / kBlock, 0, (j.cols + kBlock - 1) / kBlock});
    }
  }
  return LaunchBlockQuantizeRects(rects, stream);
}

}  // namespace ferry::cuda
