// Planning speed (Google Benchmark): real model tensor lists (tools/models presets) laid out the
// way a Megatron trainer (PP x EP, non-expert weights replicated over the EP ranks of a stage) and
// a vLLM engine with expert parallelism (TP x DP, experts spread over all TP*DP ranks, the rest
// split on dim 0 over TP and replicated over DP) hold them. Counters: ranks, tensors, fragments,
// ops, and the peak resident memory of the process.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdlib>
#include <string>

#include "core/layout/builders.h"
#include "planner/planner.h"
#include "tools/models/presets.h"

namespace ferry {
namespace {

int ParseIndexAfter(const std::string& name, const std::string& key) {
  size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  return std::atoi(name.c_str() + at + key.size());
}

struct Refit {
  Layout source, destination;
  Topology topology;
};

Refit MakeRefit(const std::string& model, int pp, int ep, int tp, int dp) {
  Refit r;
  models::ModelPreset preset = models::MakePreset(model).value();
  const models::ModelConfig& config = preset.config();
  const int src_ranks = pp * ep, dst_ranks = tp * dp;
  const std::vector<int> stage = PipelineStages(static_cast<int>(config.num_layers), pp).value();
  r.topology = Topology::Uniform(src_ranks + dst_ranks, 8);
  for (const TensorSpec& t : preset.tensors()) {
    const int st = r.source.AddTensor(t).value();
    const int dt = r.destination.AddTensor(t).value();
    const int layer = ParseIndexAfter(t.name, "layers.");
    const int expert = ParseIndexAfter(t.name, "experts.");
    const int s = layer >= 0 ? stage[layer] : (t.name.find("embed") != std::string::npos ? 0 : pp - 1);
    const Box whole = Box::FromShape(t.shape);
    if (expert >= 0) {
      const int per_rank = static_cast<int>(config.num_experts) / ep;
      r.source.AppendFragment(st, whole, s * ep + expert / per_rank, "experts");
      r.destination.AppendFragment(dt, whole, src_ranks + expert % dst_ranks, "experts");
      continue;
    }
    for (int e = 0; e < ep; ++e) r.source.AppendFragment(st, whole, s * ep + e, "dense");
    const bool split = t.shape[0] % tp == 0;
    for (int d = 0; d < dp; ++d) {
      for (int k = 0; k < tp; ++k) {
        Box box = whole;
        if (split) {
          box.lo[0] = t.shape[0] / tp * k;
          box.hi[0] = t.shape[0] / tp * (k + 1);
        }
        r.destination.AppendFragment(dt, box, src_ranks + d * tp + k, "dense");
      }
    }
  }
  return r;
}

void RunPlan(benchmark::State& state, const Refit& refit, Strategy strategy) {
  int64_t ops = 0;
  for (auto _ : state) {
    Result<PlanResult> plan = MakePlan(strategy, refit.source, refit.destination, refit.topology);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    ops = static_cast<int64_t>(plan->plan.ops.size());
    benchmark::DoNotOptimize(plan);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["ranks"] = refit.topology.NumRanks();
  state.counters["tensors"] = static_cast<double>(refit.destination.tensors.size());
  state.counters["fragments"] =
      static_cast<double>(refit.source.fragments.size() + refit.destination.fragments.size());
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
}

void BM_DeepSeekV3_PP16xEP16_to_TP32xDP8(benchmark::State& state) {
  static const Refit refit = MakeRefit("deepseek-v3", 16, 16, 32, 8);
  RunPlan(state, refit, Strategy::kReshard);
}
BENCHMARK(BM_DeepSeekV3_PP16xEP16_to_TP32xDP8)->Unit(benchmark::kMillisecond);

void BM_DeepSeekV3_GatherBroadcast(benchmark::State& state) {
  static const Refit refit = MakeRefit("deepseek-v3", 16, 16, 32, 8);
  RunPlan(state, refit, Strategy::kGatherBroadcast);
}
BENCHMARK(BM_DeepSeekV3_GatherBroadcast)->Unit(benchmark::kMillisecond);

void BM_KimiK2_PP16xEP64_to_TP32xDP16(benchmark::State& state) {
  static const Refit refit = MakeRefit("kimi-k2", 16, 64, 32, 16);
  RunPlan(state, refit, Strategy::kReshard);
}
BENCHMARK(BM_KimiK2_PP16xEP64_to_TP32xDP16)->Unit(benchmark::kMillisecond);

// Scaling with ranks: DeepSeek-V3 at (pp, ep) -> (tp, dp) = (4,4)->(8,2) ... (16,32)->(32,16).
void BM_DeepSeekV3_RankScaling(benchmark::State& state) {
  const int f = static_cast<int>(state.range(0));
  const Refit refit = MakeRefit("deepseek-v3", 4 * f > 16 ? 16 : 4 * f, 4 * f, 8 * f > 32 ? 32 : 8 * f, 2 * f);
  RunPlan(state, refit, Strategy::kReshard);
}
BENCHMARK(BM_DeepSeekV3_RankScaling)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond);

// Scaling with tensors: models of growing size on the same 64 -> 64 ranks.
void BM_TensorScaling(benchmark::State& state, const char* model) {
  const Refit refit = MakeRefit(model, 4, 16, 8, 8);
  RunPlan(state, refit, Strategy::kReshard);
}
BENCHMARK_CAPTURE(BM_TensorScaling, llama_3_1_70b, "llama-3.1-70b")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TensorScaling, qwen3_30b_a3b, "qwen3-30b-a3b")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TensorScaling, qwen3_235b_a22b, "qwen3-235b-a22b")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TensorScaling, deepseek_v3, "deepseek-v3")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ferry
