// One rank that runs a plan of one host Quantize op (core/base/fp8_block.h): a bf16 matrix stack
// in a source buffer quantized into a destination buffer of fp8 values and one of scales, through
// a real Executor with a given number of copy threads. For the executor's quantize test and
// benchmark.
#pragma once

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
  QuantizeRank(int64_t matrices, int64_t rows, int64_t cols, Fp8ScaleFormat fmt, int copy_threads);

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
  std::vector<unsigned char> source_, values_;
  std::vector<float> scales_;
};

}  // namespace ferry::testing
