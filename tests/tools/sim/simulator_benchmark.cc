// Speed benchmarks of the simulator alone on synthetic reshard-shaped plans of DeepSeek-V3's
// message counts (the planner's plans, with the targets: simulator_scaling_bench.cc).
//   bazel run -c opt //tests/tools/sim:simulator_benchmark
#include <benchmark/benchmark.h>

#include "tests/tools/sim/synthetic_plan.h"
#include "tools/sim/simulator.h"

namespace ferry::sim {
namespace {

void BM_SyntheticReshard(benchmark::State& state) {
  SyntheticShape shape;
  shape.sources = static_cast<int>(state.range(0));
  shape.destinations = static_cast<int>(state.range(0));
  shape.fan = 32;
  // About 42 GB into each destination GPU, as DeepSeek-V3 bf16 over TP32.
  shape.bytes_per_pair = (int64_t{42} << 30) / shape.fan;
  TransferPlan plan = SyntheticReshardPlan(shape);
  ClusterSpec cluster = *ClusterPreset("dgx-h100");
  RankMapping mapping = RankMapping::Identity(plan.num_ranks);
  double simulated = 0;
  for (auto _ : state) {
    Result<SimResult> r = Simulate(plan, cluster, mapping);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    simulated = r->total_time;
  }
  state.counters["ops"] = static_cast<double>(plan.ops.size());
  state.counters["simulated_s"] = simulated;
}
BENCHMARK(BM_SyntheticReshard)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace ferry::sim
