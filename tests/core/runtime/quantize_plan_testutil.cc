// One rank running Quantize ops on host or CUDA memory (tests/core/runtime/quantize_plan_testutil.h).
#include "tests/core/runtime/quantize_plan_testutil.h"

#include <cmath>
#include <string>

#include "core/cuda/batched_copy.h"

namespace ferry::testing {

QuantizeRank::QuantizeRank(int64_t m, int64_t r, int64_t c, Fp8ScaleFormat fmt, int copy_threads, int ops,
                           MemoryKind memory)
    : matrices(m), rows(r), cols(c), config_(RuntimeConfig()), memory_(memory) {
  (void)config_.Set("executor.copy_threads", std::to_string(copy_threads));
  CommunicatorOptions options;
  options.store = &store_;
  options.config = &config_;
  Result<std::unique_ptr<Communicator>> comm = Communicator::Create(options, Deadline::AfterSeconds(10));
  if (!comm.ok()) {
    init_ = comm.status();
    return;
  }
  comm_ = std::move(*comm);
  Result<std::unique_ptr<Executor>> executor = Executor::Create(*comm_);
  if (!executor.ok()) {
    init_ = executor.status();
    return;
  }
  executor_ = std::move(*executor);
  const int64_t n = m * r * c, blocks = Fp8BlockCount(m, r, c);
  source_.resize(static_cast<size_t>(n * 2));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / c % r, col = i % c;
    const int e = static_cast<int>((row / 128 * 7 + col / 128 * 3) % 30) - 15;
    const float unit = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    StoreFromFloat(DType::kBF16, source_.data() + i * 2, std::ldexp(unit, e));
  }
  values_.assign(static_cast<size_t>(n), 0);
  scales_.assign(static_cast<size_t>(blocks), 0.0f);
  plan_.num_ranks = 1;
  plan_.source_buffers = {{0, "w", n * 2}};
  plan_.destination_buffers = {{0, "w", n}, {0, "w_scale_inv", blocks * 4}};
  const int64_t per_op = m / ops, op_elements = per_op * r * c, op_blocks = Fp8BlockCount(per_op, r, c);
  for (int k = 0; k < ops; ++k) {
    Op q;
    q.kind = OpKind::kQuantize;
    q.scale_fmt = fmt;
    q.bytes = op_elements + op_blocks * 4;
    q.data = {Space::kDestination, 1, k * op_blocks * 4};
    CopyPair values;
    values.from = Region{Space::kSource, 0, k * op_elements * 2, DType::kBF16, 3, {per_op, r, c}, {r * c, c, 1}};
    values.to = Region{Space::kDestination, 0, k * op_elements, DType::kFP8E4M3, 3, {per_op, r, c}, {r * c, c, 1}};
    plan_.AddOp(q, {}, {values});
  }
  if (memory_ != MemoryKind::kCuda) return;
  const std::array<int64_t, 3> bytes = {n * 2, n, blocks * 4};
  for (size_t b = 0; b < bytes.size() && init_.ok(); ++b) {
    Result<void*> p = cuda::DeviceAlloc(bytes[b]);
    init_ = p.status();
    if (p.ok()) device_[b] = *p;
  }
  if (init_.ok()) init_ = cuda::CopyToDevice(device_[0], source_.data(), n * 2);
}

Result<ExecutorStats> QuantizeRank::Run() {
  if (!init_.ok()) return init_;
  const int64_t value_bytes = static_cast<int64_t>(values_.size()), scale_bytes = static_cast<int64_t>(scales_.size() * 4);
  if (memory_ != MemoryKind::kCuda) {
    RankMemory memory{{{source_.data(), static_cast<int64_t>(source_.size()), MemoryKind::kHost, -1}},
                      {{values_.data(), value_bytes, MemoryKind::kHost, -1},
                       {scales_.data(), scale_bytes, MemoryKind::kHost, -1}}};
    return executor_->Run(plan_, memory, Deadline::AfterSeconds(120));
  }
  RankMemory memory{{{device_[0], static_cast<int64_t>(source_.size()), MemoryKind::kCuda, 0}},
                    {{device_[1], value_bytes, MemoryKind::kCuda, 0}, {device_[2], scale_bytes, MemoryKind::kCuda, 0}}};
  Result<ExecutorStats> stats = executor_->Run(plan_, memory, Deadline::AfterSeconds(120));
  if (!stats.ok()) return stats;
  FERRY_RETURN_IF_ERROR(cuda::CopyToHost(values_.data(), device_[1], value_bytes));
  FERRY_RETURN_IF_ERROR(cuda::CopyToHost(scales_.data(), device_[2], scale_bytes));
  return stats;
}

}  // namespace ferry::testing
