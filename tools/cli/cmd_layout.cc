// `ferry layout`: builds a model preset's layout under a framework spec and prints its summary
// (optionally validating it and saving it as YAML), or one tensor's fragments and the rules behind
// them (--explain), or loads a layout file and validates it.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "core/base/strings.h"
#include "core/layout/layout_io.h"
#include "core/layout/topology.h"
#include "core/layout/validate.h"
#include "tools/cli/commands.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/layout_explain.h"
#include "tools/models/layout_summary.h"
#include "tools/models/hf_config.h"
#include "tools/models/presets.h"

namespace ferry::cli {
namespace {

struct LayoutOptions {
  std::string model;
  std::string framework;
  std::string scale = "1";
  int first_rank = 0;
  int gpus_per_node = 8;
  bool check = false;
  bool list_models = false;
  std::string save;
  std::string save_topology;
  std::string validate;
  std::string explain;
};

int Fail(const Status& status) {
  std::cerr << "ferry layout: " << status.message() << "\n";
  return 1;
}

int ValidateFile(const std::string& path) {
  Result<Layout> layout = LoadLayoutFile(path);
  if (!layout.ok()) return Fail(layout.status().WithContext("loading " + path));
  Status valid = ValidateLayout(*layout);
  if (!valid.ok()) return Fail(valid.WithContext(path + " is not a valid layout"));
  std::cout << path << ": valid\n"
            << models::FormatLayoutSummary(models::SummarizeLayout(*layout));
  return 0;
}

int ListModels() {
  for (const std::string& name : models::PresetNames()) {
    Result<models::ModelPreset> preset = models::MakePreset(name);
    if (!preset.ok()) return Fail(preset.status());
    std::printf("%-18s %8.2fB parameters, %zu tensors, %s\n", name.c_str(),
                static_cast<double>(preset->NumParams()) / 1e9, preset->tensors().size(),
                FormatBytes(static_cast<double>(preset->NumBytes())).c_str());
  }
  return 0;
}

int BuildAndSummarize(const LayoutOptions& o) {
  if (o.model.empty() || o.framework.empty()) {
    return Fail(InvalidArgument(
        "give --model and --framework (or --validate FILE, or --list-models)"));
  }
  if (o.gpus_per_node < 1) {
    return Fail(InvalidArgument("--gpus-per-node must be positive, got " +
                                std::to_string(o.gpus_per_node)));
  }
  Result<double> scale = models::ParseScale(o.scale);
  if (!scale.ok()) return Fail(scale.status());
  Result<models::ModelPreset> preset = models::MakeModel(o.model, *scale);
  if (!preset.ok()) return Fail(preset.status());
  Result<models::FrameworkSpec> spec = models::ParseFrameworkSpec(o.framework);
  if (!spec.ok()) return Fail(spec.status());
  Result<models::FrameworkSpec> resolved = models::ResolveFrameworkSpec(*spec, preset->config());
  if (!resolved.ok()) return Fail(resolved.status());

  const auto start = std::chrono::steady_clock::now();
  Result<Layout> layout = models::BuildFrameworkLayout(*preset, *resolved, o.first_rank);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!layout.ok()) return Fail(layout.status());
  if (!o.explain.empty()) {
    Result<std::string> text =
        models::ExplainTensor(preset->config(), *resolved, *layout, o.explain);
    if (!text.ok()) return Fail(text.status());
    std::cout << *text;
    return 0;
  }

  const models::LayoutSummary summary =
      models::SummarizeLayout(*layout, preset->config().name, resolved->ToString());
  const Topology topology = Topology::Uniform(summary.last_rank + 1, o.gpus_per_node);
  std::cout << models::FormatLayoutSummary(summary);
  std::printf("nodes: %d (%d GPUs per node)\nbuild time: %.1f ms\n", topology.NumNodes(),
              o.gpus_per_node, build_ms);
  if (o.check) {
    Status valid = ValidateLayout(*layout);
    if (!valid.ok()) return Fail(valid.WithContext("built layout is invalid"));
    std::cout << "validation: ok\n";
  }
  if (!o.save.empty()) {
    Status saved = SaveLayoutFile(*layout, o.save);
    if (!saved.ok()) return Fail(saved);
    std::cout << "saved layout: " << o.save << "\n";
  }
  if (!o.save_topology.empty()) {
    Status saved = SaveTopologyFile(topology, o.save_topology);
    if (!saved.ok()) return Fail(saved);
    std::cout << "saved topology: " << o.save_topology << "\n";
  }
  return 0;
}

}  // namespace

void AddLayoutCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<LayoutOptions>();
  CLI::App* cmd = app.add_subcommand(
      "layout",
      "Build a model preset's layout under a framework spec (--framework: megatron:... for a "
      "trainer, vllm:... or sglang:... for an engine) and print a summary or explain one tensor; "
      "or validate a layout file");
  std::string models_help = "model preset:";
  for (const std::string& name : models::PresetNames()) models_help += " " + name;
  models_help += "; or a Hugging Face config.json, or the directory holding it";
  CLI::Option* model = cmd->add_option("--model", options->model, models_help);
  CLI::Option* framework = cmd->add_option("--framework", options->framework,
                  "framework spec, e.g. megatron:tp=2,pp=4,first=23,last=23,ep=16 or "
                  "vllm:tp=8,dp=2,ep=16; keys: " +
                      models::FrameworkSpecKeys());
  cmd->add_option("--scale", options->scale,
                  "shrink the model's dims by this factor (e.g. 1/64), keeping its structure")
      ->capture_default_str();
  cmd->add_option("--first-rank", options->first_rank, "rank of the layout's first GPU")
      ->capture_default_str();
  cmd->add_option("--gpus-per-node", options->gpus_per_node, "GPUs per node for the topology")
      ->capture_default_str();
  CLI::Option* check = cmd->add_flag("--check", options->check, "also run ValidateLayout on the built layout");
  CLI::Option* save = cmd->add_option("--save", options->save, "write the built layout to this YAML file");
  CLI::Option* save_topology = cmd->add_option("--save-topology", options->save_topology,
                  "write the topology of the layout's ranks to this YAML file");
  CLI::Option* validate = cmd->add_option("--validate", options->validate,
                  "load this layout file (YAML/JSON) and validate it; exits 1 with the reason");
  CLI::Option* list_models = cmd->add_flag("--list-models", options->list_models, "list the model presets");
  CLI::Option* explain = cmd->add_option("--explain", options->explain,
                  "print this tensor's fragments rank by rank and the rules (with their upstream "
                  "files) that placed them, instead of the summary");
  // Each mode reads its own options; one it would ignore is refused rather than dropped.
  for (CLI::Option* build_option : {model, framework, check, save, save_topology, explain}) {
    validate->excludes(build_option);
    list_models->excludes(build_option);
  }
  validate->excludes(list_models);
  for (CLI::Option* output : {check, save, save_topology}) explain->excludes(output);
  cmd->callback([options, exit_code] {
    if (!options->validate.empty()) {
      *exit_code = ValidateFile(options->validate);
    } else if (options->list_models) {
      *exit_code = ListModels();
    } else {
      *exit_code = BuildAndSummarize(*options);
    }
  });
}

}  // namespace ferry::cli
