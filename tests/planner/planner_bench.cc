// Planning speed (Google Benchmark) on the real framework layouts of the model presets
// (tools/models: Megatron-LM trainer -> vLLM engine, 8 GPUs per node, destination after the
// source ranks). first_ms is the process's first plan of the refit, made before the loop (run one
// benchmark per process, --benchmark_filter, to time a fresh process's first plan); the loop times
// later plans. Counters: ranks, tensors, fragments, ops, the CPU time per plan split into user and
// kernel time (user_ms, sys_ms) with the page faults, the peak resident memory of the process so
// far, the planner's share of it in the first plan (plan_MiB), and for reshard the last run's time
// per planner pass (fold_ms ... emit_ms, PlanPhaseSeconds).
//   bazel build -c opt //tests/planner:planner_bench
//   bazel-bin/tests/planner/planner_bench --benchmark_filter='deepseek_v3_engines8$'
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "planner/planner.h"
#include "tests/planner/refit_layouts_testutil.h"

namespace ferry {
namespace {

// Resident memory now, in MiB (from /proc/self/statm).
double ResidentMiB() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
                      (1024.0 * 1024.0)
                : 0;
}

// Peak resident memory since the last ResetPeak() (VmHWM of /proc/self/status), in MiB.
double PeakMiB() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib / 1024.0;
}

// A getrusage time, in ms.
double Milliseconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
}

// Resets VmHWM to the current resident size (Linux: "5" > /proc/self/clear_refs).
void ResetPeak() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return;
  std::fputs("5", f);
  std::fclose(f);
}

void RunPlan(benchmark::State& state, const models::RefitLayouts& refit, Strategy strategy) {
  // The first plan, untimed by the loop: its time is first_ms and its memory plan_MiB.
  const double resident_before = ResidentMiB();
  ResetPeak();
  double first_ms = 0;
  {
    const auto start = std::chrono::steady_clock::now();
    Result<PlanResult> plan = MakePlan(strategy, refit.source, refit.destination, refit.topology);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    first_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  const double plan_mib = PeakMiB() - resident_before;
  int64_t ops = 0;
  PlanPhaseSeconds phases;
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (auto _ : state) {
    Result<PlanResult> plan = MakePlan(strategy, refit.source, refit.destination, refit.topology);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    ops = static_cast<int64_t>(plan->plan.ops.size());
    phases = plan->phases;
    benchmark::DoNotOptimize(plan);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // CPU time per plan, split: user_ms is the planner's own work, sys_ms the kernel's (mostly
  // first touches of fresh pages, which faults counts). Linux charges each scheduler tick to user
  // or system time as it samples it, so one run's split is coarse; their sum is the CPU time.
  const double runs =
      static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters["user_ms"] = (Milliseconds(usage.ru_utime) - Milliseconds(before.ru_utime)) / runs;
  state.counters["sys_ms"] = (Milliseconds(usage.ru_stime) - Milliseconds(before.ru_stime)) / runs;
  state.counters["faults"] = static_cast<double>(usage.ru_minflt - before.ru_minflt) / runs;
  state.counters["ranks"] = refit.topology.NumRanks();
  state.counters["tensors"] = static_cast<double>(refit.destination.tensors.size());
  state.counters["fragments"] =
      static_cast<double>(refit.source.fragments.size() + refit.destination.fragments.size());
  state.counters["ops"] = static_cast<double>(ops);
  if (strategy == Strategy::kReshard) {  // the last iteration's phases, in ms
    state.counters["fold_ms"] = phases.fold * 1e3;
    state.counters["intersect_ms"] = phases.intersect * 1e3;
    state.counters["route_ms"] = phases.route * 1e3;
    state.counters["select_ms"] = phases.select * 1e3;
    state.counters["order_ms"] = phases.order * 1e3;
    state.counters["emit_ms"] = phases.emit * 1e3;
  }
  state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
  // The planner's own memory: the peak while making the first plan minus what the process held
  // before (the layouts and earlier benchmarks' freed-but-kept heap, so if anything an
  // underestimate of fresh allocations; the layouts themselves are the caller's).
  state.counters["plan_MiB"] = plan_mib;
  state.counters["first_ms"] = first_ms;
}

void BM_Refit(benchmark::State& state, const char* model, const char* src, const char* dst,
              Strategy strategy) {
  RunPlan(state, CachedRefit(model, src, dst), strategy);
}

// The Megatron sources keep a rank's experts of a layer in one buffer (experts=single_grouped,
// the layout these benchmarks were first recorded with) unless they say otherwise.
// The guards: DeepSeek-V3 from Megatron PP16xEP16 to vLLM TP32 in 8 engines (512 ranks), and
// Kimi-K2 at 1024 -> 512 ranks, on the layouts as the presets build them: each layer's experts as
// tensor stacks, as both frameworks store them. Also DeepSeek-V3 to one vLLM engine of DP8 with
// expert parallelism (vLLM's only EP size, tp*dp = 256: one expert a rank). The "ep32" names are
// the benchmarks' former specs, kept so that recorded results stay comparable by name.
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_engines8, "deepseek-v3",
                  "megatron:pp=16,ep=16,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,ep=32,engines=8", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_pp16ep16_to_tp32dp8ep32, "deepseek-v3",
                  "megatron:pp=16,ep=16,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,dp=8,ep=256", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, kimi_k2_pp16ep64_to_tp32dp16ep32, "kimi-k2",
                  "megatron:pp=16,ep=64,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,dp=16,ep=512", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
// The same refits with both layouts naming the checkpoint's expert tensors one by one
// (expert_tensors=members): the planner folds them into stacks itself (planner/fold_stacks.h).
// Same bytes, buffers and plan size; the difference is what reading and folding the members costs.
BENCHMARK_CAPTURE(
    BM_Refit, deepseek_v3_pp16ep16_to_tp32dp8ep32_members, "deepseek-v3",
    "megatron:pp=16,ep=16,first=3,last=2,expert_tensors=members,experts=single_grouped",
    "vllm:tp=32,dp=8,ep=256,expert_tensors=members", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(
    BM_Refit, kimi_k2_pp16ep64_to_tp32dp16ep32_members, "kimi-k2",
    "megatron:pp=16,ep=64,first=3,last=2,expert_tensors=members,experts=single_grouped",
    "vllm:tp=32,dp=16,ep=512,expert_tensors=members", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
// DeepSeek-V3 with the two sides naming experts differently: the planner first stacks the
// trainer's members (members_to_stacks), or expands the trainer's stacks, the smaller layout,
// into members and folds (stacks_to_members).
BENCHMARK_CAPTURE(
    BM_Refit, deepseek_v3_pp16ep16_members_to_stacks, "deepseek-v3",
    "megatron:pp=16,ep=16,first=3,last=2,expert_tensors=members,experts=single_grouped",
    "vllm:tp=32,dp=8,ep=256", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_pp16ep16_stacks_to_members, "deepseek-v3",
                  "megatron:pp=16,ep=16,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,dp=8,ep=256,expert_tensors=members", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
// The same refits with one trainer buffer per expert (experts=grouped): nothing stacks on the
// source, so the planner sees every expert slice as its own piece.
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_pp16ep16_separate_experts, "deepseek-v3",
                  "megatron:pp=16,ep=16,first=3,last=2,experts=grouped", "vllm:tp=32,dp=8,ep=256",
                  Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, kimi_k2_pp16ep64_separate_experts, "kimi-k2",
                  "megatron:pp=16,ep=64,first=3,last=2,experts=grouped", "vllm:tp=32,dp=16,ep=512",
                  Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_gather_broadcast, "deepseek-v3",
                  "megatron:pp=16,ep=16,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,dp=8,ep=256", Strategy::kGatherBroadcast)
    ->Unit(benchmark::kMillisecond);
// vLLM without expert parallelism (ep=1): every expert's FFN split over all tp*dp ranks, so each
// expert tensor becomes tp*dp fragments (millions in all at 256 ranks). Shown at 64 ranks.
BENCHMARK_CAPTURE(BM_Refit, deepseek_v3_pp4ep16_to_tp8dp4ep1, "deepseek-v3",
                  "megatron:pp=4,ep=16,first=16,last=15,experts=single_grouped",
                  "vllm:tp=8,dp=4,ep=1", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);

// Scaling with ranks (DeepSeek-V3, vLLM ep = tp*dp).
BENCHMARK_CAPTURE(BM_Refit, ranks_32, "deepseek-v3",
                  "megatron:pp=4,ep=4,first=16,last=15,experts=single_grouped",
                  "vllm:tp=8,dp=2,ep=16", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, ranks_128, "deepseek-v3",
                  "megatron:pp=8,ep=8,first=7,last=6,experts=single_grouped",
                  "vllm:tp=16,dp=4,ep=64", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, ranks_1024, "deepseek-v3",
                  "megatron:pp=16,ep=32,first=3,last=2,experts=single_grouped",
                  "vllm:tp=32,dp=16,ep=512", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);

// Scaling with tensors: models of growing size on 64 -> 64 ranks.
BENCHMARK_CAPTURE(BM_Refit, tensors_llama_3_1_70b, "llama-3.1-70b", "megatron:tp=8,pp=8",
                  "vllm:tp=8,dp=8", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, tensors_qwen3_235b_a22b, "qwen3-235b-a22b",
                  "megatron:pp=4,ep=16,first=23,last=23,experts=single_grouped",
                  "vllm:tp=8,dp=8,ep=64", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Refit, tensors_deepseek_v3, "deepseek-v3",
                  "megatron:pp=4,ep=16,first=16,last=15,experts=single_grouped",
                  "vllm:tp=8,dp=8,ep=64", Strategy::kReshard)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry
