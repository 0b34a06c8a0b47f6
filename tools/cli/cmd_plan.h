// `ferry plan`: builds the source and destination layouts (a model preset under two framework
// specs, or layout files), plans the refit with both strategies (reshard and gather-and-broadcast),
// and prints a summary table side by side; optionally writes one plan as JSON and/or DOT.
//
// The pieces are exposed for tests: RunPlanCommand does the work and returns the report (or a
// clear error), FormatPlanReport renders the table. Pure functions apart from reading/writing the
// named files and calling `progress`; thread-safe.
#pragma once

#include <functional>
#include <string>

#include "core/base/status.h"
#include "core/plan/stats.h"
#include "planner/planner.h"
#include "tools/cli/cli_config.h"

namespace ferry::cli {

struct PlanCommandArgs {
  // Preset mode: a model preset and two framework specs (tools/models/framework_layouts.h).
  std::string model;
  double scale = 1.0;       // shrink the preset's wide dims (tests, quick looks)
  std::string source_spec;  // "megatron:pp=16,ep=16"
  std::string destination_spec;  // "vllm:tp=32,ep=32,engines=8"
  std::string destination_dtype;  // --dst-dtype: the destination's weights in this dtype (RefitSourceArgs)
  int gpus_per_node = 8;
  bool colocated = false;   // destination on the source's ranks
  // File mode (instead of a preset): layouts in YAML/JSON (docs/layout-format.md), optional
  // topology (default: every rank up to the highest one used, gpus_per_node per node).
  std::string source_layout_file, destination_layout_file, topology_file;
  // Which plan --json / --dot write.
  Strategy strategy = Strategy::kReshard;
  std::string json_file, dot_file;
  bool validate = false;    // run ValidatePlan on both plans (slow on large plans)
  // --config / --set: the planner.* options of both plans (chunk sizes, hierarchical, relay,
  // the baseline's buckets), read as `ferry run` reads them, so both plan the same thing.
  ConfigArgs config;
  // Called with one line per step as the command goes (layouts built, each plan made, validated,
  // written; before a file is written too, as a large plan takes a while), on the calling thread.
  // Null: silent. The CLI prints the lines to stderr.
  std::function<void(const std::string&)> progress;
};

struct StrategyReport {
  Strategy strategy = Strategy::kReshard;
  PlanStats stats;
  int64_t transfers = 0;      // source regions read (copy pairs from a source buffer, direct sends)
  double planning_seconds = 0;  // wall time of the planner call
  PlanPhaseSeconds phases;      // the planner's passes (reshard only)
  int stacks = 0;               // tensor families planned as stacks (reshard only)
  // The smallest executor.staging_budget that runs the plan with every message staged
  // (PlanOrderStagingBytes, core/plan/staging_layout.h).
  int64_t staging_needed = 0;
};

struct PlanReport {
  std::string description;  // what was planned: "deepseek-v3: megatron:... -> vllm:..." or files
  int ranks = 0, nodes = 0;
  int64_t tensors = 0;               // destination tensors, a tensor stack counted once
  int64_t tensor_stacks = 0;         // of them, tensor stacks (core/layout/tensor_stack.h)
  int64_t stack_members = 0;         // tensors those stacks stand for
  int64_t source_fragments = 0, destination_fragments = 0;
  int64_t destination_bytes = 0;  // bytes of all destination fragments
  StrategyReport reshard, gather_broadcast;
  // Why the baseline has no plan, when the destination holds block-scaled fp8 or weights in
  // another dtype (--dst-dtype), which only the reshard planner quantizes or converts (then
  // `gather_broadcast` is empty); else empty.
  std::string gather_broadcast_refused;
};

// Builds the layouts, plans with both strategies through the library facade (RefitPlan, with the
// configuration's planner options) and writes the requested files. Errors
// (InvalidArgument / NotFound) name the bad input: unknown model, bad framework spec, a spec that
// does not fit the model, unreadable or incompatible layout files, a missing argument.
Result<PlanReport> RunPlanCommand(const PlanCommandArgs& args);

// The summary table: one row per quantity, reshard and gather-broadcast side by side.
std::string FormatPlanReport(const PlanReport& report);

}  // namespace ferry::cli
