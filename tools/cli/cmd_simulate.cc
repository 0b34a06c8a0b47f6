// `ferry simulate`: plans a refit between two framework layouts of a model preset and replays the
// ferry reshard plan and the gather-and-broadcast baseline on a cluster model, printing both beside
// the physical lower bound, with link utilisation and the critical path; optionally writes a
// Chrome-trace timeline and an SVG of per-node network ingress (of the reshard plan).
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/strings.h"
#include "core/runtime/executor_options.h"
#include "planner/options.h"
#include "planner/planner.h"
#include "tools/cli/cli_config.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress_reporter.h"
#include "tools/cli/refit_inputs.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/hf_config.h"
#include "tools/models/presets.h"
#include "tools/sim/cluster.h"
#include "tools/sim/lower_bound.h"
#include "tools/sim/report.h"
#include "tools/sim/simulator.h"

namespace ferry::cli {
namespace {

struct SimulateArgs {
  std::string model = "deepseek-v3";
  std::string scale = "1";
  std::string source = "megatron:pp=16,ep=16,first=3,last=2";
  // The published RL rollout fleet: 8 independent engines of 32 GPUs.
  std::string destination = "vllm:tp=32,ep=32,engines=8";
  std::string cluster = "dgx-h100";
  bool colocated = false;
  std::string trace_path;
  std::string svg_path;
  ConfigArgs config;  // --config / --set: the planner.* options, as `ferry plan` and `run` read them
  std::string dtype;  // empty: the preset's
  std::string destination_dtype;  // --dst-dtype: the destination's weights in this dtype, converted
  bool no_baseline = false;  // skip the gather-and-broadcast plan (it is slow to simulate at scale)
  // The window the simulator gives each rank; -1: the config's executor.max_in_flight, the window
  // `ferry run` would use with the same --config/--set.
  int max_in_flight = -1;
  // The staging budget the simulator gives each rank ("64MiB", "0": unlimited); empty: the
  // config's executor.staging_budget. Resolved into staging_budget.
  std::string staging_budget_text;
  int64_t staging_budget = -1;
  // Reshard without hierarchical fan-out or relays (reference-style M2N): shorthand for
  // --set planner.hierarchical=false --set planner.relay=off.
  bool flat = false;
  int propagation_rounds = sim::SimOptions{}.propagation_rounds;
  double rate_slack = sim::SimOptions{}.rate_slack;
  // Resolved from the config's executor.direct_intra_node: ferry's plan carries same-node
  // messages as direct reads, as `ferry run` would.
  bool direct_reads = false;
  bool quantizing_reads = true;  // executor.quantizing_reads
  ConvertOnSender convert_on_sender = ConvertOnSender::kAuto;  // executor.convert_on_sender
  // Seconds between progress lines on stderr while a stage (planning, simulating) runs; a stage
  // shorter than that prints none. 0: no progress lines.
  double progress_seconds = 5;
};

struct StrategyRun {
  std::string name;
  sim::SimResult result;
  double plan_seconds = 0;  // wall time of the planner
  double sim_seconds = 0;   // wall time of the simulator
  double sim_cpu_seconds = 0;  // CPU time of the simulator's thread (steady on a loaded machine)
  bool simulated = false;      // false: skipped (--no-baseline)
};

// CPU time the calling thread has used: the simulator runs on one thread, so this is its cost
// whatever else shares the machine.
double ThreadCpuSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Hands the heap's free pages back to the system: glibc keeps freed small allocations resident,
// and what a pass frees in many small pieces is not all reused by the larger arrays that follow.
void ReleaseFreeHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// The layouts of the refit, read by the plans made from them and by the lower bound. The
// simulator reads only a plan, so they are released once the last plan is made: at thousands of
// GPUs a simulation then does not hold them beside its plan.
struct RefitLayoutPair {
  std::unique_ptr<const Layout> source, destination;
  void Release() {
    source.reset();
    destination.reset();
  }
};

// `strategy`'s plan of the layouts with the config's planner options, as RefitPlan::Make makes it
// (without keeping the layouts); the planner's wall time in `seconds`.
Result<PlanResult> PlanFor(Strategy strategy, const RefitLayoutPair& layouts,
                           const Topology& topology, const Config& config,
                           ProgressReporter& progress, double* seconds) {
  FERRY_ASSIGN_OR_RETURN(PlannerOptions options, PlannerOptions::FromConfig(config));
  progress.Begin("planning " + std::string(StrategyName(strategy)));
  const auto t0 = std::chrono::steady_clock::now();
  Result<PlanResult> planned =
      MakePlan(strategy, *layouts.source, *layouts.destination, topology, options);
  if (!planned.ok()) {
    return planned.status().WithContext(std::string(StrategyName(strategy)) + " planning");
  }
  *seconds = Since(t0);
  return planned;
}

// The simulator's options from resolved arguments (SimulationConfig).
sim::SimOptions SimulatorOptions(const SimulateArgs& args) {
  sim::SimOptions options;
  options.propagation_rounds = args.propagation_rounds;
  options.rate_slack = args.rate_slack;
  options.max_in_flight = args.max_in_flight;
  options.staging_budget = args.staging_budget;
  options.direct_reads = args.direct_reads;
  options.quantizing_reads = args.quantizing_reads;
  options.convert_on_sender = args.convert_on_sender;
  return options;
}

// Simulates `plan`, reporting where it is to `progress` as the stage `what`.
Result<sim::SimResult> SimulateWithProgress(const TransferPlan& plan,
                                            const sim::ClusterSpec& cluster,
                                            const sim::RankMapping& mapping,
                                            sim::SimOptions options, const std::string& what,
                                            ProgressReporter& progress) {
  sim::SimProgress where;
  options.progress = &where;
  progress.Begin(what, &where);
  Result<sim::SimResult> simulated = sim::Simulate(plan, cluster, mapping, options);
  progress.End();
  return simulated;
}

// Plans `strategy` and simulates its plan, which lives for the call only; releases the layouts
// after planning when `last_plan` (no later plan reads them). The plan's network demand goes to
// `demand` when not null.
Result<StrategyRun> PlanAndSimulate(Strategy strategy, RefitLayoutPair& layouts, bool last_plan,
                                    const Topology& topology, const Config& config,
                                    const sim::ClusterSpec& cluster,
                                    const sim::RankMapping& mapping, const sim::SimOptions& options,
                                    ProgressReporter& progress, NetworkDemand* demand) {
  StrategyRun run;
  run.name = std::string(StrategyName(strategy));
  FERRY_ASSIGN_OR_RETURN(const PlanResult planned,
                         PlanFor(strategy, layouts, topology, config, progress, &run.plan_seconds));
  if (last_plan) layouts.Release();
  if (demand != nullptr) *demand = planned.demand;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  Result<sim::SimResult> simulated = SimulateWithProgress(planned.plan, cluster, mapping, options,
                                                          "simulating " + run.name, progress);
  if (!simulated.ok()) return simulated.status().WithContext("simulating " + run.name);
  run.sim_seconds = Since(t0);
  run.sim_cpu_seconds = ThreadCpuSeconds() - cpu0;
  run.result = std::move(*simulated);
  run.simulated = true;
  return run;
}

Status WriteReports(const SimulateArgs& args, const RefitLayoutPair& layouts,
                    const Topology& topology, const Config& config,
                    const sim::ClusterSpec& cluster, const sim::RankMapping& mapping,
                    ProgressReporter& progress) {
  double seconds = 0;
  FERRY_ASSIGN_OR_RETURN(const PlanResult planned,
                         PlanFor(Strategy::kReshard, layouts, topology, config, progress, &seconds));
  sim::SimOptions options = SimulatorOptions(args);
  options.record_op_times = !args.trace_path.empty();
  options.record_ingress = !args.svg_path.empty();
  FERRY_ASSIGN_OR_RETURN(sim::SimResult r,
                         SimulateWithProgress(planned.plan, cluster, mapping, options,
                                              "simulating reshard for the trace/SVG", progress));
  if (!args.trace_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::string json, sim::ChromeTraceJson(planned.plan, r));
    FERRY_RETURN_IF_ERROR(sim::WriteTextFile(args.trace_path, json));
    std::printf("wrote Chrome trace of the reshard plan to %s\n", args.trace_path.c_str());
  }
  if (!args.svg_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::string svg, sim::IngressSvg(r));
    FERRY_RETURN_IF_ERROR(sim::WriteTextFile(args.svg_path, svg));
    std::printf("wrote per-node ingress SVG of the reshard plan to %s\n", args.svg_path.c_str());
  }
  return Status::Ok();
}

// One row of the side-by-side report: its label and the reshard, baseline and bound cells; the
// baseline's cell reads "skipped" when --no-baseline left it unsimulated.
void PrintRow(const char* label, const std::string& reshard, const std::string& baseline,
              bool baseline_run, const std::string& bound = "") {
  std::printf("%-24s %18s %18s %14s\n", label, reshard.c_str(),
              baseline_run ? baseline.c_str() : "skipped", bound.c_str());
}

std::string Ratio(double value, double of) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2fx", of > 0 ? value / of : 0);
  return text;
}

// The side-by-side report: predicted times, bytes, ops, simulator costs, link utilisation and
// the critical path of each plan simulated.
void PrintComparison(const StrategyRun& reshard, const StrategyRun& baseline, double lower,
                     const std::string& limit, double bound_network_bytes) {
  const sim::SimResult& a = reshard.result;
  const sim::SimResult& b = baseline.result;
  const bool ran = baseline.simulated;
  std::printf("%-24s %18s %18s %14s\n", "", "ferry reshard", "gather-broadcast", "lower bound");
  PrintRow("predicted time", FormatSeconds(a.total_time), FormatSeconds(b.total_time), ran,
           FormatSeconds(lower));
  PrintRow("vs lower bound", Ratio(a.total_time, lower), Ratio(b.total_time, lower), ran, "1.00x");
  PrintRow("network bytes", FormatBytes(a.network_bytes), FormatBytes(b.network_bytes), ran,
           FormatBytes(bound_network_bytes));
  PrintRow("nvlink bytes", FormatBytes(a.nvlink_bytes), FormatBytes(b.nvlink_bytes), ran);
  PrintRow("ops", std::to_string(a.num_ops), std::to_string(b.num_ops), ran);
  PrintRow("messages", std::to_string(a.num_messages), std::to_string(b.num_messages), ran);
  PrintRow("ops waiting for staging", std::to_string(a.staging_waits),
           std::to_string(b.staging_waits), ran);
  PrintRow("planner / simulator wall",
           FormatSeconds(reshard.plan_seconds) + " / " + FormatSeconds(reshard.sim_seconds),
           FormatSeconds(baseline.plan_seconds) + " / " + FormatSeconds(baseline.sim_seconds), ran);
  PrintRow("simulator cpu (1 thread)", FormatSeconds(reshard.sim_cpu_seconds),
           FormatSeconds(baseline.sim_cpu_seconds), ran);
  PrintRow("most classes on a link", std::to_string(a.peak_link_classes),
           std::to_string(b.peak_link_classes), ran);
  std::printf("lower bound limited by: %s\n", limit.c_str());
  if (ran) {
    std::printf("speed-up of ferry over gather-broadcast: %s\n", Ratio(b.total_time, a.total_time).c_str());
  }
  std::printf("\n");
  for (const StrategyRun* run : {&reshard, &baseline}) {
    if (run->result.num_ops == 0) continue;
    std::printf("%s: link utilisation\n%s", run->name.c_str(),
                sim::UtilisationTable(run->result).c_str());
    std::printf("%s: critical path\n%s\n", run->name.c_str(),
                sim::CriticalPathText(run->result).c_str());
  }
}

// The options both plans are made with (--config/--set, and --flat's planner settings); resolves
// args->max_in_flight and args->staging_budget from the executor's options when not given.
Result<Config> SimulationConfig(SimulateArgs* args) {
  ConfigArgs config_args = args->config;
  if (args->flat) {
    config_args.settings.insert(config_args.settings.begin(),
                                {"planner.hierarchical=false", "planner.relay=off"});
  }
  FERRY_ASSIGN_OR_RETURN(Config options, LoadConfig(config_args));
  FERRY_ASSIGN_OR_RETURN(ExecutorOptions executor, ExecutorOptions::FromConfig(options));
  if (args->max_in_flight < 0) args->max_in_flight = executor.max_in_flight;
  args->direct_reads = executor.direct_intra_node;
  args->quantizing_reads = executor.quantizing_reads;
  args->convert_on_sender = executor.convert_on_sender;
  if (args->staging_budget_text.empty()) {
    args->staging_budget = executor.staging_budget;
  } else {
    FERRY_ASSIGN_OR_RETURN(args->staging_budget,
                           ParseBytes(args->staging_budget_text).WithContext("--staging-budget"));
  }
  return options;
}

// What is simulated: the model, both sides' layouts and ranks, and the cluster.
void PrintInputs(const models::ModelPreset& preset, const models::RefitLayouts& refit,
                 const sim::ClusterSpec& cluster, const SimulateArgs& args) {
  std::printf("model    %s (%s)\n", preset.config().name.c_str(),
              FormatBytes(static_cast<double>(preset.NumBytes())).c_str());
  std::printf("source   %s on ranks 0..%d\n", refit.source_spec.ToString().c_str(),
              models::NumRanks(refit.source_spec) - 1);
  std::printf("dest     %s on ranks %d..%d%s%s\n", refit.destination_spec.ToString().c_str(),
              refit.destination_first_rank,
              refit.destination_first_rank + models::NumRanks(refit.destination_spec) - 1,
              args.colocated ? " (colocated)" : "",
              args.destination_dtype.empty() ? "" : (", weights as " + args.destination_dtype).c_str());
  std::printf("cluster  %s, %d GPUs in %d nodes\n\n", cluster.Summary().c_str(),
              cluster.TotalGpus(), cluster.num_nodes);
}

// What a simulation runs on: the model, its two layouts, and the cluster fitted to their ranks.
struct SimulatedRefit {
  models::ModelPreset preset;
  models::RefitLayouts refit;  // its specs; the layouts themselves moved into `layouts`
  sim::ClusterSpec cluster;
  Topology topology;
  sim::RankMapping mapping;
  RefitLayoutPair layouts;
};

// The model of `args` (scaled, its dtype as asked) and the refit's layouts, on the cluster's
// topology with the ranks mapped onto its GPUs.
Result<SimulatedRefit> BuildSimulatedRefit(const SimulateArgs& args) {
  FERRY_ASSIGN_OR_RETURN(double scale, models::ParseScale(args.scale));
  FERRY_ASSIGN_OR_RETURN(models::ModelConfig config, models::ResolveModelConfig(args.model));
  FERRY_ASSIGN_OR_RETURN(config, models::ScaleConfig(config, scale));
  if (!args.dtype.empty()) {
    // Weights stored in another dtype (e.g. FP8 inference weights); fp32 tensors stay fp32.
    FERRY_ASSIGN_OR_RETURN(config.dtype, ParseDType(args.dtype));
  }
  FERRY_ASSIGN_OR_RETURN(models::ModelPreset preset, models::ModelPreset::FromConfig(config));
  FERRY_ASSIGN_OR_RETURN(models::FrameworkSpec src, models::ParseFrameworkSpec(args.source));
  FERRY_ASSIGN_OR_RETURN(models::FrameworkSpec dst, models::ParseFrameworkSpec(args.destination));
  FERRY_ASSIGN_OR_RETURN(sim::ClusterSpec cluster, sim::LoadCluster(args.cluster));
  models::RefitOptions refit_options;
  refit_options.colocated = args.colocated;
  refit_options.gpus_per_node = cluster.RanksPerNode();
  FERRY_ASSIGN_OR_RETURN(models::RefitLayouts refit,
                         models::BuildRefitLayouts(preset, src, dst, refit_options));
  if (!args.destination_dtype.empty()) {
    FERRY_ASSIGN_OR_RETURN(DestinationInDType converted,
                           DestinationWithWeightsIn(refit.destination, args.destination_dtype));
    refit.destination = std::move(converted.layout);
  }
  Topology topology = sim::TopologyForCluster(cluster, refit.topology.NumRanks());
  FERRY_ASSIGN_OR_RETURN(sim::RankMapping mapping,
                         sim::RankMapping::FromTopology(topology, cluster));
  FERRY_ASSIGN_OR_RETURN(cluster, sim::FitClusterToMapping(cluster, mapping));
  RefitLayoutPair layouts{std::make_unique<const Layout>(std::move(refit.source)),
                          std::make_unique<const Layout>(std::move(refit.destination))};
  return SimulatedRefit{std::move(preset), std::move(refit), std::move(cluster),
                        std::move(topology), std::move(mapping), std::move(layouts)};
}

// The gather-and-broadcast baseline, or a run named as skipped (with the reason printed) when its
// planner cannot move these layouts (a dtype conversion, block-scaled fp8) that the reshard
// planned.
Result<StrategyRun> SimulateBaseline(SimulatedRefit& r, bool last_plan, const Config& options,
                                     const SimulateArgs& resolved, ProgressReporter& progress) {
  StrategyRun baseline;
  baseline.name = "gather-broadcast (skipped)";
  if (resolved.no_baseline) return baseline;
  // The baseline's bucket buffers are NeMo RL's GPU memory, not ferry's staging: its plan bounds
  // them itself (two buffers a rank, planner/gather_broadcast.cc), so no budget applies.
  sim::SimOptions baseline_options = SimulatorOptions(resolved);
  baseline_options.staging_budget = 0;
  baseline_options.direct_reads = false;  // NCCL's broadcast stages every bucket
  Result<StrategyRun> planned =
      PlanAndSimulate(Strategy::kGatherBroadcast, r.layouts, last_plan, r.topology, options,
                      r.cluster, r.mapping, baseline_options, progress, nullptr);
  if (planned.ok()) return planned;
  if (planned.status().code() != StatusCode::kInvalidArgument) return planned.status();
  std::printf("gather-broadcast skipped: %s\n\n", planned.status().ToString().c_str());
  return baseline;
}

Status RunSimulate(const SimulateArgs& args) {
  FERRY_ASSIGN_OR_RETURN(SimulatedRefit r, BuildSimulatedRefit(args));
  SimulateArgs resolved = args;
  FERRY_ASSIGN_OR_RETURN(const Config options, SimulationConfig(&resolved));
  PrintInputs(r.preset, r.refit, r.cluster, args);
  std::fflush(stdout);  // before any progress line on stderr
  ProgressReporter progress(
      "ferry simulate", std::cerr,
      std::chrono::milliseconds(static_cast<int64_t>(args.progress_seconds * 1000)));

  progress.Begin("computing the lower bound");
  FERRY_ASSIGN_OR_RETURN(sim::LowerBound bound, sim::ComputeLowerBound(*r.layouts.source, *r.layouts.destination,
                                                                      r.cluster, r.mapping));
  progress.End();
  // Its scratch, lists of boxes per node and per GPU, would otherwise stay resident beside the
  // planner's and then the simulator's memory.
  ReleaseFreeHeap();
  // The trace and the SVG plan the reshard again after both simulations.
  const bool reports = !args.trace_path.empty() || !args.svg_path.empty();
  NetworkDemand demand;
  FERRY_ASSIGN_OR_RETURN(
      StrategyRun reshard,
      PlanAndSimulate(Strategy::kReshard, r.layouts, args.no_baseline && !reports, r.topology, options,
                      r.cluster, r.mapping, SimulatorOptions(resolved), progress, &demand));
  FERRY_ASSIGN_OR_RETURN(StrategyRun baseline, SimulateBaseline(r, !reports, options, resolved, progress));
  ferry::LowerBound demand_bound = ferry::ComputeLowerBound(demand, r.topology);
  double lower = bound.seconds;
  std::string limit = bound.limit;
  if (demand_bound.source_egress_seconds > lower) {
    lower = demand_bound.source_egress_seconds;
    limit = "source egress (bytes only some source nodes hold)";
  }

  PrintComparison(reshard, baseline, lower, limit, bound.total_network_bytes);
  if (reports) {
    FERRY_RETURN_IF_ERROR(
        WriteReports(resolved, r.layouts, r.topology, options, r.cluster, r.mapping, progress));
  }
  return Status::Ok();
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Predict refit time on a cluster model: ferry's reshard plan vs gather-and-broadcast vs the "
      "lower bound");
  cmd->add_option("--model", args->model,
                  "model preset (deepseek-v3, qwen3-235b-a22b, ...) or a Hugging Face "
                  "config.json, or its directory")
      ->capture_default_str();
  cmd->add_option("--scale", args->scale, "shrink the model's wide dims, e.g. 1/64")
      ->capture_default_str();
  cmd->add_option("--src", args->source, "trainer layout, e.g. megatron:pp=16,ep=16,first=3,last=2")
      ->capture_default_str();
  cmd->add_option("--dst", args->destination,
                  "inference layout, e.g. vllm:tp=32,ep=32,engines=8 (engines: independent copies)")
      ->capture_default_str();
  cmd->add_option("--cluster", args->cluster,
                  "cluster preset (dgx-h100, dgx-h200, gb200-nvl72, efa-h100) or a YAML file")
      ->capture_default_str();
  cmd->add_flag("--colocated", args->colocated, "destination ranks on the source's GPUs");
  cmd->add_option("--trace", args->trace_path, "write a Chrome-trace JSON of the reshard plan");
  cmd->add_option("--svg", args->svg_path, "write an SVG of per-node network ingress over time");
  AddConfigOptions(*cmd, args->config);
  cmd->add_flag("--no-baseline", args->no_baseline,
                "skip the gather-and-broadcast plan (slow to simulate with thousands of GPUs)");
  cmd->add_option("--max-in-flight", args->max_in_flight,
                  "simulator: most messages a rank has moving at once (0: unlimited); by default the "
                  "config's executor.max_in_flight, as `ferry run` would use")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--staging-budget", args->staging_budget_text,
                  "simulator: staging a rank holds at once, e.g. 256MiB (0: unlimited); by default "
                  "the config's executor.staging_budget, as `ferry run` would use");
  cmd->add_flag("--flat", args->flat,
                "reshard plan without hierarchical fan-out or relays: every destination GPU "
                "fetches its bytes from a source directly (the published M2N reshard's shape)");
  cmd->add_option("--dtype", args->dtype,
                  "weights' dtype instead of the preset's (e.g. fp8_e4m3 for FP8 weights)");
  cmd->add_option("--dst-dtype", args->destination_dtype,
                  "destination weights (>= 2-dim bf16/fp16 tensors) in this dtype: fp8_e4m3, "
                  "fp8_e5m2, bf16, fp16 or fp32; the plan converts (as ferry run --dst-dtype)");
  cmd->add_option("--propagation-rounds", args->propagation_rounds,
                  "simulator: how far a rate change spreads beyond the links it touches")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--rate-slack", args->rate_slack,
                  "simulator: fraction of a link's capacity that may stay idle between rate "
                  "recomputations (0: recompute every link an event touches)")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  cmd->add_option("--progress", args->progress_seconds,
                  "seconds between progress lines on stderr while planning or simulating takes "
                  "longer than that (0: none)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->callback([args, exit_code]() {
    Status s = RunSimulate(*args);
    if (!s.ok()) std::cerr << "ferry simulate: " << s.message() << "\n";
    *exit_code = s.ok() ? 0 : 1;
  });
}

}  // namespace ferry::cli
