// Executor copy throughput against plain memcpy on one rank: a 256 MiB same-rank Copy op (dense,
// and column-strided as a Pack would be), run through Executor::Run with the copy pool; the same
// by the row length and stride of its rows (the access pattern of a refit's copies); and a
// host conversion between dtypes (one Convert op of 64 Mi elements, one copy thread); and a host
// Quantize op (block-scaled fp8 of 4 bf16 [4096, 4096] matrices, 128 MiB) with 1 copy thread
// (the executor thread alone: how every host quantization ran before the copy pool took its
// blocks) beside 2 and 4.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"
#include "tests/core/runtime/quantize_plan_testutil.h"

namespace ferry {
namespace {

constexpr int64_t kBytes = 256ll << 20;

void BM_Memcpy(benchmark::State& state) {
  std::vector<char> a(kBytes, 1), b(kBytes, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kBytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

// Runs `plan` on one rank (its executor with `copy_threads` copy threads, over `memory`) once per
// benchmark iteration, skipping the benchmark with the error when a run fails.
void RunEachIteration(benchmark::State& state, int copy_threads, const TransferPlan& plan,
                      const RankMemory& memory) {
  InMemoryStore store;
  Config config = RuntimeConfig();
  (void)config.Set("executor.copy_threads", std::to_string(copy_threads));
  CommunicatorOptions options;
  options.store = &store;
  options.config = &config;
  auto comm = Communicator::Create(options, Deadline::AfterSeconds(10));
  auto executor = Executor::Create(**comm);
  for (auto _ : state) {
    auto stats = (*executor)->Run(plan, memory, Deadline::AfterSeconds(60));
    if (!stats.ok()) state.SkipWithError(stats.status().ToString().c_str());
  }
}

// A 2-dim copy of [rows, cols] `dtype` elements from the source buffer to the destination buffer,
// rows `from_stride` and `to_stride` elements apart, both starting `offset` bytes in.
CopyPair MatrixCopy(DType dtype, int64_t rows, int64_t cols, int64_t from_stride, int64_t to_stride,
                    int64_t offset = 0) {
  CopyPair pair;
  for (Region* r : {&pair.from, &pair.to}) {
    r->dtype = dtype;
    r->ndim = 2;
    r->shape = {rows, cols};
    r->offset = offset;
  }
  pair.from.strides = {from_stride, 1};
  pair.to.strides = {to_stride, 1};
  pair.from.space = Space::kSource;
  pair.to.space = Space::kDestination;
  return pair;
}

// One rank's plan of one Copy op (or a Convert op, `kind`) moving `copies` (`bytes` in all)
// between a source buffer of `source_bytes` and a destination buffer of `destination_bytes`.
TransferPlan OneCopyPlan(int64_t source_bytes, int64_t destination_bytes, int64_t bytes,
                         const std::vector<CopyPair>& copies, OpKind kind = OpKind::kCopy) {
  TransferPlan plan;
  plan.num_ranks = 1;
  plan.source_buffers = {{0, "s", source_bytes}};
  plan.destination_buffers = {{0, "d", destination_bytes}};
  Op copy;
  copy.kind = kind;
  copy.bytes = bytes;
  plan.AddOp(copy, {}, copies);
  return plan;
}

// Runs OneCopyPlan's plan over host buffers of its sizes (the source filled with ones) once per
// benchmark iteration and counts `bytes` processed per iteration.
void RunCopyPlan(benchmark::State& state, int copy_threads, int64_t source_bytes, int64_t destination_bytes,
                 int64_t bytes, const std::vector<CopyPair>& copies) {
  const TransferPlan plan = OneCopyPlan(source_bytes, destination_bytes, bytes, copies);
  std::vector<char> a(source_bytes, 1), b(destination_bytes, 0);
  RankMemory memory{{{a.data(), source_bytes, MemoryKind::kHost, -1}},
                    {{b.data(), destination_bytes, MemoryKind::kHost, -1}}};
  RunEachIteration(state, copy_threads, plan, memory);
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_ExecutorCopy(benchmark::State& state) {
  const bool strided = state.range(0) != 0;
  // A [rows, 2*cols] fp32 source; copy all of it (dense) or its left half twice over (strided).
  const int64_t cols = 4096, rows = kBytes / 4 / cols;
  const int64_t width = strided ? cols / 2 : cols;
  std::vector<CopyPair> copies = {MatrixCopy(DType::kFP32, rows, width, cols, cols)};
  if (strided) copies.push_back(MatrixCopy(DType::kFP32, rows, width, cols, cols, cols / 2 * 4));  // right halves
  RunCopyPlan(state, static_cast<int>(state.range(1)), kBytes, kBytes, kBytes, copies);
}
BENCHMARK(BM_ExecutorCopy)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"strided", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Copy rate by row length and stride: rows of `range(0)` bytes, each taken from the start of a
// source row of `range(1)` bytes (a column slice of a wider tensor, as a refit reads one) into a
// dense destination, with one copy thread: 256 MiB of rows, fewer where the source would pass
// 1 GiB. Rows shorter than the executor's streaming threshold (core/runtime/strided_copy.cc) are
// cached copies. tools/sim/calibrate_host.py writes these rates into the simulator's
// host_copy_row_rates (tools/sim/row_rates.h).
void BM_ExecutorCopyRows(benchmark::State& state) {
  const int64_t row = state.range(0), stride = state.range(1);
  const int64_t rows = std::min(kBytes / row, (int64_t{1} << 30) / stride);
  const int64_t bytes = rows * row;
  RunCopyPlan(state, 1, rows * stride, bytes, bytes, {MatrixCopy(DType::kUInt8, rows, row, stride, row)});
}
BENCHMARK(BM_ExecutorCopyRows)
    ->Args({48, 96})->Args({64, 128})->Args({64, 1024})->Args({64, 4096})
    ->Args({256, 512})->Args({512, 1024})->Args({512, 8192})
    ->Args({2048, 4096})->Args({16384, 32768})->Args({65536, 131072})->Args({65536, 65536})
    ->ArgNames({"row_bytes", "stride"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Conversion rate of the host path: one Convert op converting a dense [rows, 4096] matrix, 64 Mi
// elements, with one copy thread; bytes processed count the elements read and written.
void BM_ExecutorConvert(benchmark::State& state) {
  constexpr DType kPairs[][2] = {{DType::kBF16, DType::kFP8E4M3},
                                 {DType::kBF16, DType::kFP32},
                                 {DType::kFP32, DType::kBF16},
                                 {DType::kFP16, DType::kBF16}};
  const DType from = kPairs[state.range(0)][0], to = kPairs[state.range(0)][1];
  const int64_t cols = 4096, rows = (int64_t{64} << 20) / cols;
  CopyPair pair = MatrixCopy(from, rows, cols, cols, cols);
  pair.to.dtype = to;
  const int64_t read = rows * cols * DTypeSize(from), written = rows * cols * DTypeSize(to);
  const TransferPlan plan = OneCopyPlan(read, written, written, {pair}, OpKind::kConvert);
  std::vector<char> a(static_cast<size_t>(read), 0x3c), b(static_cast<size_t>(written), 0);
  RankMemory memory{{{a.data(), read, MemoryKind::kHost, -1}},
                    {{b.data(), written, MemoryKind::kHost, -1}}};
  state.SetLabel(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)));
  RunEachIteration(state, 1, plan, memory);
  state.SetBytesProcessed(state.iterations() * (read + written));
}
BENCHMARK(BM_ExecutorConvert)
    ->DenseRange(0, 3)
    ->ArgNames({"pair"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_ExecutorQuantize(benchmark::State& state) {
  const auto fmt = state.range(1) != 0 ? Fp8ScaleFormat::kUe8m0 : Fp8ScaleFormat::kFloat32;
  testing::QuantizeRank rank(4, 4096, 4096, fmt, static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto stats = rank.Run();
    if (!stats.ok()) state.SkipWithError(stats.status().ToString().c_str());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rank.source().size()));
}
BENCHMARK(BM_ExecutorQuantize)
    ->ArgsProduct({{1, 2, 4}, {0, 1}})
    ->ArgNames({"threads", "ue8m0"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Scheduling overhead: `range(0)` 4 KiB messages a rank sends to itself (local transport), each
// received into staging and unpacked into the destination: three ops per message.
void BM_ExecutorManySmallMessages(benchmark::State& state) {
  const int messages = static_cast<int>(state.range(0));
  const int64_t size = 4096;
  TransferPlan plan;
  plan.num_ranks = 1;
  plan.source_buffers = {{0, "s", size * messages}};
  plan.destination_buffers = {{0, "d", size * messages}};
  for (int m = 0; m < messages; ++m) {
    int slot = plan.AddSlot(0, size);
    Op send;
    send.kind = OpKind::kSend;
    send.peer = 0;
    send.message = m;
    send.bytes = size;
    send.SetData(ByteRange(Space::kSource, 0, m * size, size));
    plan.AddOp(send);
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.SetData(ByteRange(Space::kStaging, slot, 0, size));
    int r = plan.AddOp(recv);
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.bytes = size;
    plan.AddOp(unpack, {r},
               {{Region::Bytes(Space::kStaging, slot, 0, size),
                 Region::Bytes(Space::kDestination, 0, m * size, size)}});
  }
  std::vector<char> a(size * messages, 1), b(size * messages, 0);
  RankMemory memory{{{a.data(), size * messages, MemoryKind::kHost, -1}},
                    {{b.data(), size * messages, MemoryKind::kHost, -1}}};
  RunEachIteration(state, 1, plan, memory);
  state.SetItemsProcessed(state.iterations() * messages * 3);
}
BENCHMARK(BM_ExecutorManySmallMessages)->Arg(1000)->Arg(20000)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry
