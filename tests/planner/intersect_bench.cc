// Speed of the fragment intersection (planner/intersect.h) on the real framework layouts of the
// largest presets, beside the frozen pre-speed-up copy (tests/planner/intersect_reference.h) so one
// run compares both under the same machine load:
//   bazel build -c opt //tests/planner:intersect_bench
//   taskset -c 1 bazel-bin/tests/planner/intersect_bench --benchmark_min_time=0.01
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>

#include <map>
#include <string>
#include <utility>

#include "planner/intersect.h"
#include "tests/planner/intersect_reference.h"
#include "tests/planner/refit_layouts_testutil.h"

namespace ferry {
namespace {

using IntersectFn = Result<Intersection> (*)(const Layout&, const Layout&);

void BM_Intersect(benchmark::State& state, IntersectFn intersect, const char* model, const char* src,
                  const char* dst) {
  const models::RefitLayouts& refit = CachedRefit(model, src, dst);
  size_t groups = 0, pieces = 0;
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  // The fastest call's CPU time: the machine is shared, and the minimum is the least disturbed.
  double fastest_ms = 1e300;
  for (auto _ : state) {
    timespec start{}, stop{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    Result<Intersection> x = intersect(refit.source, refit.destination);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
    fastest_ms = std::min(fastest_ms, (stop.tv_sec - start.tv_sec) * 1e3 + (stop.tv_nsec - start.tv_nsec) / 1e6);
    if (!x.ok()) {
      state.SkipWithError(x.status().ToString().c_str());
      return;
    }
    groups = x->groups.size();
    pieces = x->pieces.size();
    benchmark::DoNotOptimize(x);
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  // Page faults per call: first touches of fresh memory (costly in VMs).
  state.counters["faults"] = benchmark::Counter(static_cast<double>(after.ru_minflt - before.ru_minflt),
                                                benchmark::Counter::kAvgIterations);
  state.counters["min_ms"] = fastest_ms;
  state.counters["fragments"] =
      static_cast<double>(refit.source.fragments.size() + refit.destination.fragments.size());
  state.counters["groups"] = static_cast<double>(groups);
  state.counters["pieces"] = static_cast<double>(pieces);
}

const IntersectFn kCurrent = &IntersectLayouts;
const IntersectFn kReference = &reference::IntersectLayouts;

// The planner's targets: DeepSeek-V3 at 256 -> 256 ranks, Kimi-K2 at 1024 -> 512 ranks.
BENCHMARK_CAPTURE(BM_Intersect, deepseek_v3_reference, kReference, "deepseek-v3",
                  "megatron:pp=16,ep=16", "vllm:tp=32,dp=8,ep=32")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Intersect, deepseek_v3, kCurrent, "deepseek-v3", "megatron:pp=16,ep=16",
                  "vllm:tp=32,dp=8,ep=32")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Intersect, kimi_k2_reference, kReference, "kimi-k2", "megatron:pp=16,ep=64",
                  "vllm:tp=32,dp=16,ep=32")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Intersect, kimi_k2, kCurrent, "kimi-k2", "megatron:pp=16,ep=64",
                  "vllm:tp=32,dp=16,ep=32")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
