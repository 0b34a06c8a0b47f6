// One rank running one host Quantize op (tests/core/runtime/quantize_plan_testutil.h).
#include "tests/core/runtime/quantize_plan_testutil.h"

#include <cmath>
#include <string>

namespace ferry::testing {

QuantizeRank::QuantizeRank(int64_t m, int64_t r, int64_t c, Fp8ScaleFormat fmt, int copy_threads)
    : matrices(m), rows(r), cols(c), config_(RuntimeConfig()) {
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
  Op q;
  q.kind = OpKind::kQuantize;
  q.scale_fmt = fmt;
  q.bytes = n + blocks * 4;
  q.data = {Space::kDestination, 1, 0};
  CopyPair values;
  values.from = Region{Space::kSource, 0, 0, DType::kBF16, 3, {m, r, c}, {r * c, c, 1}};
  values.to = Region{Space::kDestination, 0, 0, DType::kFP8E4M3, 3, {m, r, c}, {r * c, c, 1}};
  plan_.AddOp(q, {}, {values});
}

Result<ExecutorStats> QuantizeRank::Run() {
  if (!init_.ok()) return init_;
  RankMemory memory{{{source_.data(), static_cast<int64_t>(source_.size()), MemoryKind::kHost, -1}},
                    {{values_.data(), static_cast<int64_t>(values_.size()), MemoryKind::kHost, -1},
                     {scales_.data(), static_cast<int64_t>(scales_.size() * 4), MemoryKind::kHost, -1}}};
  return executor_->Run(plan_, memory, Deadline::AfterSeconds(120));
}

}  // namespace ferry::testing
