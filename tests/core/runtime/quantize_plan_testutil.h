// One rank that runs a plan of Quantize ops (core/base/fp8_block.h): a bf16 matrix stack in a
// source buffer quantized into a destination buffer of fp8 values and one of scales, each op a
// run of whole matrices, through a real Executor with a given number of copy threads, on host or
// CUDA memory. For the executor's quantize tests and benchmark.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "core/base/fp8_block.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"

namespace ferry::testing {

class QuantizeRank {
 public:
  // `copy_threads`: executor.copy_threads (1: the executor thread alone). Deterministic source
  // values of per-block magnitudes.
  QuantizeRank(int64_t matrices, int64_t rows, int64_t cols, Fp8ScaleFormat fmt, int copy_threads)
      : QuantizeRank(matrices, rows, cols, fmt, copy_threads, 1, MemoryKind::kHost) {}
  // `ops` Quantize ops of matrices / ops matrices each (`ops` divides `matrices`); with
  // MemoryKind::kCuda every buffer in device memory of device 0 (never freed: a test process's).
  QuantizeRank(int64_t matrices, int64_t rows, int64_t cols, Fp8ScaleFormat fmt, int copy_threads, int ops,
               MemoryKind memory);

  // Runs the plan once (or returns why the rank could not be set up); the destination holds
  // values() and scales() after.
  Result<ExecutorStats> Run();

  const std::vector<unsigned char>& source() const { return source_; }
  const std::vector<unsigned char>& values() const { return values_; }
  const std::vector<float>& scales() const { return scales_; }
  int64_t matrices, rows, cols;

 private:
  Status init_;
  InMemoryStore store_;
  Config config_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Executor> executor_;
  TransferPlan plan_;
  MemoryKind memory_;
  std::vector<unsigned char> source_, values_;
  std::vector<float> scales_;
  std::array<void*, 3> device_{};  // source, values, scales, with MemoryKind::kCuda
};

}  // namespace ferry::testing
