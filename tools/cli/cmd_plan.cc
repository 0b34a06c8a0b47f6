// `ferry plan`: layouts from a model preset + framework specs or from files, both strategies
// planned, a side-by-side summary table, optional JSON/DOT export of one plan.
#include "tools/cli/cmd_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <iostream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/base/strings.h"
#include "core/layout/tensor_stack.h"
#include "core/plan/export.h"
#include "core/plan/staging_layout.h"
#include "core/plan/validate.h"
#include "core/refit/refit.h"
#include "tools/cli/commands.h"
#include "tools/cli/refit_inputs.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry::cli {
namespace {

int64_t CountTransfers(const TransferPlan& plan) {
  int64_t n = 0;
  for (const Op& op : plan.ops) {
    for (const CopyPair& c : plan.Copies(op)) n += c.from.space == Space::kSource ? 1 : 0;
    if (op.kind == OpKind::kSend && op.data.space == Space::kSource) ++n;
  }
  return n;
}

// Durations in the plan report: milliseconds with two decimals.
std::string Seconds(double s) { return FormatSeconds(s, 2); }

std::string Count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// Seconds since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Reports a step to args.progress, if set.
void Progress(const PlanCommandArgs& args, const std::string& line) {
  if (args.progress) args.progress(line);
}

// Writes one export through `write`, telling args.progress before and after (with the file's
// size): a plan of millions of copy pairs is gigabytes of JSON.
Status ExportFile(const PlanCommandArgs& args, const std::string& what, const std::string& path,
                  const std::function<Status()>& write) {
  Progress(args, "writing " + what + " to " + path);
  const auto start = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(write());
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  Progress(args, "wrote " + what + " to " + path + " (" +
                     (error ? std::string("size unknown") : FormatBytes(static_cast<double>(size))) +
                     ") in " + Seconds(SecondsSince(start)));
  return Status::Ok();
}

Result<StrategyReport> PlanOne(Strategy strategy, const RefitInputs& in, const Config& config,
                               const PlanCommandArgs& args) {
  StrategyReport report;
  report.strategy = strategy;
  const std::string name(StrategyName(strategy));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const RefitPlan> refit,
                         RefitPlan::Make(in.source, in.destination, in.topology, strategy, config));
  report.planning_seconds = refit->planning_seconds();
  const PlanResult* result = &refit->planned();
  Progress(args, name + ": planned in " + Seconds(report.planning_seconds) + " (" +
                     Count(static_cast<int64_t>(result->plan.ops.size())) + " ops, " +
                     Count(static_cast<int64_t>(result->plan.copies.size())) + " copy pairs)");
  if (args.validate) {
    const auto validate_start = std::chrono::steady_clock::now();
    if (Status s = ValidatePlan(result->plan, in.source, in.destination); !s.ok()) {
      return s.WithContext(name + " plan is invalid");
    }
    Progress(args, name + ": valid (checked in " + Seconds(SecondsSince(validate_start)) + ")");
  }
  report.phases = result->phases;
  report.stacks = result->stacks;
  report.stats = refit->Stats();
  report.transfers = CountTransfers(result->plan);
  FERRY_ASSIGN_OR_RETURN(report.staging_needed, PlanOrderStagingBytes(result->plan));
  if (strategy == args.strategy) {
    const TransferPlan& plan = result->plan;
    if (!args.json_file.empty()) {
      FERRY_RETURN_IF_ERROR(ExportFile(args, name + " plan JSON", args.json_file, [&] {
        return WritePlanJsonFile(args.json_file, plan, -1, &in.source, &in.destination,
                                 report.staging_needed);
      }));
    }
    if (!args.dot_file.empty()) {
      FERRY_RETURN_IF_ERROR(ExportFile(args, name + " plan DOT", args.dot_file,
                                       [&] { return WritePlanDotFile(args.dot_file, plan); }));
    }
  }
  return report;
}

}  // namespace

Result<PlanReport> RunPlanCommand(const PlanCommandArgs& args) {
  const bool preset_mode = !args.model.empty();
  const bool file_mode = !args.source_layout_file.empty() || !args.destination_layout_file.empty();
  if (preset_mode == file_mode) {
    return InvalidArgument(
        "give either --model with --src/--dst, or --src-layout with --dst-layout");
  }
  if (file_mode && (!args.source_spec.empty() || !args.destination_spec.empty())) {
    return InvalidArgument("--src/--dst framework specs need --model, not layout files");
  }
  if (preset_mode && !args.topology_file.empty()) {
    return InvalidArgument("--topology is for layout files; with --model use --gpus-per-node");
  }
  RefitSourceArgs source;
  source.model = args.model;
  source.scale = args.scale;
  source.source_spec = args.source_spec;
  source.destination_spec = args.destination_spec;
  source.colocated = args.colocated;
  source.source_layout_file = args.source_layout_file;
  source.destination_layout_file = args.destination_layout_file;
  source.topology_file = args.topology_file;
  source.gpus_per_node = args.gpus_per_node;
  source.destination_dtype = args.destination_dtype;
  const auto load_start = std::chrono::steady_clock::now();
  Result<RefitInputs> in = LoadRefitInputs(source);
  if (!in.ok()) return in.status();
  Progress(args, "layouts: " + in->description + ": " +
                     Count(static_cast<int64_t>(in->source.fragments.size())) + " source + " +
                     Count(static_cast<int64_t>(in->destination.fragments.size())) +
                     " destination fragments (" + Seconds(SecondsSince(load_start)) + ")");

  PlanReport report;
  report.description = in->description;
  report.ranks = in->topology.NumRanks();
  report.nodes = in->topology.NumNodes();
  report.tensors = static_cast<int64_t>(in->destination.tensors.size());
  for (const TensorSpec& t : in->destination.tensors) {
    if (const std::optional<TensorStackName> stack = ParseTensorStackName(t.name)) {
      ++report.tensor_stacks;
      report.stack_members += stack->size();
    }
  }
  report.source_fragments = static_cast<int64_t>(in->source.fragments.size());
  report.destination_fragments = static_cast<int64_t>(in->destination.fragments.size());
  report.destination_bytes = in->destination.FragmentBytes();
  FERRY_ASSIGN_OR_RETURN(const Config config, LoadConfig(args.config));
  FERRY_ASSIGN_OR_RETURN(report.reshard, PlanOne(Strategy::kReshard, *in, config, args));
  Result<StrategyReport> baseline = PlanOne(Strategy::kGatherBroadcast, *in, config, args);
  if (baseline.ok()) {
    report.gather_broadcast = *baseline;
  } else if ((!in->destination.block_scaled.empty() || in->weights_converted) &&
             args.strategy == Strategy::kReshard) {
    // The baseline moves bytes as they are: it refuses to quantize or convert, which the reshard
    // planned.
    report.gather_broadcast_refused = baseline.status().message();
  } else {
    return baseline.status();
  }
  return report;
}

std::string FormatPlanReport(const PlanReport& r) {
  std::vector<std::array<std::string, 3>> rows;
  const StrategyReport& a = r.reshard;
  const StrategyReport& b = r.gather_broadcast;
  const bool refused = !r.gather_broadcast_refused.empty();
  auto row = [&](std::string name, std::string x, std::string y) {
    if (refused) y = name.empty() ? std::string(StrategyName(Strategy::kGatherBroadcast)) : "-";
    rows.push_back({std::move(name), std::move(x), std::move(y)});
  };
  auto bytes = [](int64_t n) { return FormatBytes(static_cast<double>(n)); };
  row("", std::string(StrategyName(a.strategy)), std::string(StrategyName(b.strategy)));
  row("transfers", Count(a.transfers), Count(b.transfers));
  row("ops", Count(a.stats.ops), Count(b.stats.ops));
  row("messages", Count(a.stats.messages), Count(b.stats.messages));
  row("network messages", Count(a.stats.network_messages), Count(b.stats.network_messages));
  for (LinkClass link : {LinkClass::kSameRank, LinkClass::kSameNode, LinkClass::kNetwork}) {
    const int i = static_cast<int>(link);
    row("bytes " + std::string(LinkClassName(link)), bytes(a.stats.bytes_by_link[i]),
        bytes(b.stats.bytes_by_link[i]));
  }
  row("pack + unpack bytes", bytes(a.stats.pack_bytes + a.stats.unpack_bytes),
      bytes(b.stats.pack_bytes + b.stats.unpack_bytes));
  row("max node ingress", bytes(a.stats.max_node_ingress), bytes(b.stats.max_node_ingress));
  row("max node egress", bytes(a.stats.max_node_egress), bytes(b.stats.max_node_egress));
  row("staging needed per rank", bytes(a.staging_needed), bytes(b.staging_needed));
  row("longest message chain", Count(a.stats.longest_message_chain),
      Count(b.stats.longest_message_chain));
  row("lower bound", Seconds(a.stats.lower_bound.seconds), Seconds(b.stats.lower_bound.seconds));
  row("predicted time", Seconds(a.stats.predicted_seconds), Seconds(b.stats.predicted_seconds));
  row("planning time", Seconds(a.planning_seconds), Seconds(b.planning_seconds));

  std::array<size_t, 3> width{};
  for (const auto& cells : rows) {
    for (size_t c = 0; c < 3; ++c) width[c] = std::max(width[c], cells[c].size());
  }
  std::ostringstream out;
  out << r.description << "\n";
  out << "ranks " << r.ranks << " on " << r.nodes << " nodes, tensors " << Count(r.tensors);
  if (r.tensor_stacks > 0) {
    out << " (" << Count(r.tensor_stacks) << " tensor stacks of " << Count(r.stack_members)
        << ")";
  }
  out << ", fragments " << Count(r.source_fragments) << " source + "
      << Count(r.destination_fragments) << " destination, destination bytes "
      << bytes(r.destination_bytes) << "\n\n";
  for (const auto& cells : rows) {
    out << cells[0] << std::string(width[0] - cells[0].size(), ' ');
    for (size_t c = 1; c < 3; ++c) {
      out << "  " << std::string(width[c] - cells[c].size(), ' ') << cells[c];
    }
    out << "\n";
  }
  if (refused) out << "\ngather-broadcast: " << r.gather_broadcast_refused << "\n";
  const PlanPhaseSeconds& p = a.phases;
  out << "\nreshard planning: fold stacks " << Seconds(p.fold) << " ("
      << (a.stacks > 0 ? Count(a.stacks) + " stacks" : "none to fold") << "), intersect "
      << Seconds(p.intersect) << ", route " << Seconds(p.route)
      << ", select sources " << Seconds(p.select) << ", messages " << Seconds(p.order)
      << ", emit ops " << Seconds(p.emit) << "\n";
  if (a.stats.predicted_seconds > 0 && b.stats.predicted_seconds > 0) {
    out << "\nreshard predicted " << FormatSpeedup(a.stats.predicted_seconds, b.stats.predicted_seconds)
        << " than gather-broadcast\n";
  }
  return out.str();
}

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanCommandArgs>();
  auto strategy = std::make_shared<std::string>("reshard");
  auto scale = std::make_shared<std::string>("1");
  CLI::App* cmd = app.add_subcommand(
      "plan", "Plan a refit (reshard and gather-and-broadcast) and print a summary table");
  cmd->add_option("--model", args->model, "Model preset (" + [] {
    std::string names;
    for (const std::string& n : models::PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return names;
  }() + ") or a Hugging Face config.json, or the directory holding it");
  cmd->add_option("--scale", *scale, "Shrink the preset's wide dims by this factor (0, 1], e.g. 1/64");
  cmd->add_option("--src", args->source_spec, "Source framework, e.g. megatron:pp=16,ep=16,first=3,last=2");
  cmd->add_option("--dst", args->destination_spec, "Destination framework, e.g. vllm:tp=32,ep=32,engines=8");
  cmd->add_option("--dst-dtype", args->destination_dtype,
                  "Destination weights (>= 2-dim bf16/fp16 tensors) in this dtype: fp8_e4m3, "
                  "fp8_e5m2, bf16, fp16 or fp32; the plan converts (as ferry run --dst-dtype)");
  cmd->add_option("--gpus-per-node", args->gpus_per_node, "GPUs per node (default 8)");
  cmd->add_flag("--colocated", args->colocated, "Destination on the source's ranks");
  cmd->add_option("--src-layout", args->source_layout_file, "Source layout file (YAML/JSON)");
  cmd->add_option("--dst-layout", args->destination_layout_file, "Destination layout file");
  cmd->add_option("--topology", args->topology_file, "Topology file (with layout files)");
  cmd->add_option("--strategy", *strategy, "Plan written by --json/--dot: reshard | gather-broadcast");
  cmd->add_option("--json", args->json_file, "Write the plan as JSON to this file");
  cmd->add_option("--dot", args->dot_file, "Write the plan as Graphviz DOT to this file");
  cmd->add_flag("--validate", args->validate, "Check both plans with the plan validator");
  AddConfigOptions(*cmd, args->config);
  cmd->callback([args, strategy, scale, exit_code] {
    Result<double> parsed_scale = models::ParseScale(*scale);
    if (!parsed_scale.ok()) {
      std::cerr << "ferry plan: --scale: " << parsed_scale.status().message() << "\n";
      *exit_code = 2;
      return;
    }
    args->scale = *parsed_scale;
    Result<Strategy> parsed = ParseStrategy(*strategy);
    if (!parsed.ok()) {
      std::cerr << "ferry plan: --strategy: " << parsed.status().message() << "\n";
      *exit_code = 2;
      return;
    }
    args->strategy = *parsed;
    args->progress = [](const std::string& line) { std::cerr << "ferry plan: " << line << "\n"; };
    Result<PlanReport> report = RunPlanCommand(*args);
    if (!report.ok()) {
      std::cerr << "ferry plan: " << report.status().message() << "\n";
      *exit_code = 1;
      return;
    }
    std::cout << FormatPlanReport(*report);
    *exit_code = 0;
  });
}

}  // namespace ferry::cli
