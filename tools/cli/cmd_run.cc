// `ferry run` / `ferry demo`: the command lines, the local launch and the rank entry point; the
// work of a rank is in run_rank.cc.
#include "tools/cli/cmd_run.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "core/base/config.h"
#include "core/cuda/batched_copy.h"
#include "core/refit/config.h"
#include "core/runtime/transport.h"
#include "tools/cli/commands.h"
#include "tools/cli/fault_injection.h"
#include "tools/cli/local_launch.h"
#include "tools/cli/run_rank.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry::cli {
namespace {

// --iterations and --warmup at most: a bound that no benchmark reaches and that keeps refit
// counters far from overflow.
constexpr int kMaxRefitsPerStrategy = 1000000;

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void AddCommonOptions(CLI::App& cmd, RunArgs& args, std::string& strategy) {
  cmd.add_option("--transport", args.transport,
                 "transport between ranks (tcp, ucx, libfabric; `ferry config` lists options)");
  cmd.add_option("--strategy", strategy, "reshard, gather-broadcast or both");
  cmd.add_option("--iterations", args.iterations, "measured refits per strategy")
      ->check(CLI::Range(1, kMaxRefitsPerStrategy))
      ->capture_default_str();
  cmd.add_option("--warmup", args.warmup, "unmeasured refits per strategy before them")
      ->check(CLI::Range(0, kMaxRefitsPerStrategy))
      ->capture_default_str();
  cmd.add_option("--timeout", args.timeout_seconds,
                 "seconds the whole run may take, in (0, 2592000] (30 days); ranks still running "
                 "after it are killed")
      ->capture_default_str();
  cmd.add_option("--config", args.config_file, "YAML file of options (see `ferry config`)");
  cmd.add_option("--set", args.settings, "an option as name=value (repeatable)");
  cmd.add_option("--results", args.results_file, "append one CSV row per strategy to this file");
  cmd.add_option("--save-plan", args.save_plan_file,
                 "rank 0 writes the plan it executes (the first strategy's) as JSON, as `ferry plan --json` does");
  cmd.add_option("--memory", args.memory, "where buffers live: host or cuda (needs a GPU)")
      ->check(CLI::IsMember({"host", "cuda"}));
  cmd.add_option("--cuda-alloc", args.cuda_alloc,
                 "with --memory cuda: cudamalloc (default) or vmm (20 MiB cuMem mappings, as PyTorch's "
                 "expandable_segments)")
      ->check(CLI::IsMember({"cudamalloc", "vmm"}));
  cmd.add_option("--store-host", args.store_host,
                 "who serves the rendezvous store: launcher (default; rank 0 is an ordinary rank) or rank0")
      ->check(CLI::IsMember({"launcher", "rank0"}));
  cmd.add_flag("--pretend-nodes", args.pretend_nodes,
               "ranks take their nodes from the topology, not from host names (set by the local launcher)")
      ->group("");
}

Status ApplyStrategy(const std::string& text, RunArgs& args) {
  if (text == "both") {
    args.strategies = {Strategy::kReshard, Strategy::kGatherBroadcast};
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(Strategy s, ParseStrategy(text));
  args.strategies = {s};
  return Status::Ok();
}

}  // namespace

Result<RefitInputs> BuildRefitInputs(const RunArgs& args) {
  const bool preset_mode = !args.model.empty();
  const bool file_mode = !args.source_layout_file.empty() || !args.destination_layout_file.empty();
  if (preset_mode == file_mode) {
    return InvalidArgument(
        "give either --model with --src/--dst, or --src-layout with --dst-layout");
  }
  RefitSourceArgs source;
  if (preset_mode) {
    Result<double> scale = models::ParseScale(args.scale);
    if (!scale.ok()) return scale.status().WithContext("--scale " + args.scale);
    source.scale = *scale;
  }
  source.model = args.model;
  source.source_spec = args.source_spec;
  source.destination_spec = args.destination_spec;
  source.colocated = args.colocated;
  source.source_layout_file = args.source_layout_file;
  source.destination_layout_file = args.destination_layout_file;
  source.gpus_per_node = args.gpus_per_node;
  source.destination_dtype = args.destination_dtype;
  return LoadRefitInputs(source);
}

std::vector<std::string> RunArgv(const RunArgs& args) {
  std::vector<std::string> argv = {"ferry", "run"};
  auto add = [&](const std::string& flag, const std::string& value) {
    if (!value.empty()) {
      argv.push_back(flag);
      argv.push_back(value);
    }
  };
  add("--model", args.model);
  add("--scale", args.model.empty() ? "" : args.scale);
  add("--src", args.source_spec);
  add("--dst", args.destination_spec);
  add("--src-layout", args.source_layout_file);
  add("--dst-layout", args.destination_layout_file);
  if (args.colocated) argv.push_back("--colocated");
  add("--gpus-per-node", std::to_string(args.gpus_per_node));
  add("--dst-dtype", args.destination_dtype);
  add("--transport", args.transport);
  std::string strategy = args.strategies.size() == 2 ? "both"
                                                     : std::string(StrategyName(args.strategies[0]));
  add("--strategy", strategy);
  add("--iterations", std::to_string(args.iterations));
  add("--warmup", std::to_string(args.warmup));
  if (args.verify) argv.push_back("--verify");
  if (args.leak_check) argv.push_back("--leak-check");
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", args.timeout_seconds);
  add("--timeout", timeout);
  add("--config", args.config_file);
  for (const std::string& s : args.settings) add("--set", s);
  add("--results", args.results_file);
  add("--save-plan", args.save_plan_file);
  if (args.pretend_nodes) argv.push_back("--pretend-nodes");
  add("--memory", args.memory);
  add("--cuda-alloc", args.cuda_alloc);
  add("--inject-fault", args.inject_fault);
  if (args.recover) argv.push_back("--recover");
  return argv;
}

int RunRank(const RunArgs& args) {
  Status status = RunRankOrError(args);
  if (status.ok()) return 0;
  ReportRankFailure(status);
  return 1;
}

// --timeout bounds the launcher's wait: NaN, zero or a negative value would kill every rank at
// once, after starting them.
Status CheckTimeout(double seconds) {
  if (!(seconds > 0) || seconds > kMaxDurationSeconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", seconds);
    return InvalidArgument(std::string("--timeout ") + text + ": the run's seconds must be in (0, " +
                           std::to_string(static_cast<int64_t>(kMaxDurationSeconds)) + "] (30 days)");
  }
  return Status::Ok();
}

// Each fault names one of the refit's `ranks` ranks; one past them would never fire.
Status CheckFaultRanks(const std::string& spec, int ranks) {
  FERRY_ASSIGN_OR_RETURN(std::vector<Fault> faults, ParseFaults(spec, "--inject-fault"));
  for (const Fault& fault : faults) {
    if (fault.rank >= ranks) {
      return InvalidArgument("--inject-fault: rank " + std::to_string(fault.rank) + " is not in [0, " +
                             std::to_string(ranks) + "), the ranks of this refit");
    }
  }
  return Status::Ok();
}

// The options every rank will read (--config, FERRY_*, --transport, --set): each known and in
// range, each link class's transport registered. Checked once here rather than by every rank
// after the launch.
Status CheckRunConfig(const RunArgs& args) {
  FERRY_ASSIGN_OR_RETURN(Config config, RankConfig(args));
  FERRY_RETURN_IF_ERROR(CheckConfig(config));
  for (const char* option : {"transport.network", "transport.intra_node", "transport.same_rank"}) {
    FERRY_ASSIGN_OR_RETURN(std::string name, config.GetString(option));
    if (!TransportRegistry::Default().Contains(name)) {
      return InvalidArgument("option '" + std::string(option) + "': unknown transport '" + name +
                             "' (registered: " + JoinNames(TransportRegistry::Default().Names()) + ")");
    }
  }
  return Status::Ok();
}

// The gather-and-broadcast baseline copies bytes as they are: it cannot run a refit whose weights
// --dst-dtype converted, and every rank would find that out only when it plans.
Status CheckStrategiesConvert(const RunArgs& args, const RefitInputs& in) {
  if (!in.weights_converted) return Status::Ok();
  for (Strategy strategy : args.strategies) {
    if (strategy == Strategy::kGatherBroadcast) {
      return InvalidArgument("--dst-dtype " + args.destination_dtype +
                             ": the gather-and-broadcast baseline does not convert dtypes; run it "
                             "with --strategy reshard");
    }
  }
  return Status::Ok();
}

// --results and --save-plan can be written: rank 0 writes them only after the refits.
Status CheckOutputFiles(const RunArgs& args) {
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--results", &args.results_file},
                                   {"--save-plan", &args.save_plan_file}}) {
    if (path->empty()) continue;
    std::ofstream probe(*path, std::ios::app);
    if (!probe) {
      return IoError(std::string(flag) + " " + *path + ": cannot open the file for writing: " +
                     std::strerror(errno));
    }
  }
  return Status::Ok();
}

// --inject-fault and --recover: the faults parse, and a recovery can follow each of them.
Status CheckFaultOptions(const RunArgs& args) {
  FERRY_RETURN_IF_ERROR(CheckTimeout(args.timeout_seconds));
  FERRY_ASSIGN_OR_RETURN(std::vector<Fault> faults, ParseFaults(args.inject_fault, "--inject-fault"));
  if (!args.recover) return Status::Ok();
  if (args.leak_check) return InvalidArgument("--recover and --leak-check do not go together (a recovery opens new links)");
  for (const Fault& fault : faults) {
    const std::string which = "--recover: the fault on rank " + std::to_string(fault.rank);
    if (fault.rank == 0 && args.store_host == "rank0") {
      return InvalidArgument(which + ": with --store-host rank0, rank 0 hosts the store and cannot be replaced; "
                             "inject the fault into another rank, or let the launcher host the store");
    }
    if (fault.kind != "kill") {
      return InvalidArgument(which + ": --recover replaces a rank whose process died: inject a kill (a stopped "
                             "rank is named by the survivors but never exits, so the launcher cannot replace it)");
    }
    if (fault.refit > args.iterations || (!fault.mid_refit && fault.refit == args.iterations)) {
      return InvalidArgument(which + " must leave a measured refit to recover into (--iterations " +
                             std::to_string(args.iterations) + ")");
    }
  }
  if (static_cast<int>(faults.size()) > args.max_replacements) {
    return InvalidArgument("--recover: " + std::to_string(faults.size()) + " kills need as many replacements, over "
                           "--max-replacements " + std::to_string(args.max_replacements));
  }
  return Status::Ok();
}

namespace {

// What `ferry run` checks before it starts a process: the options and the refit they describe.
Status CheckRunArgs(const RunArgs& args, const RefitInputs& in) {
  FERRY_RETURN_IF_ERROR(CheckFaultRanks(args.inject_fault, in.ranks));
  if (!TransportRegistry::Default().Contains(args.transport)) {
    return InvalidArgument("--transport " + args.transport + ": unknown; known: " +
                           JoinNames(TransportRegistry::Default().Names()));
  }
  FERRY_RETURN_IF_ERROR(CheckStrategiesConvert(args, in));
  FERRY_RETURN_IF_ERROR(CheckRunConfig(args));
  FERRY_RETURN_IF_ERROR(CheckOutputFiles(args));
  if (args.cuda_alloc != "cudamalloc" && args.memory != "cuda") {
    return InvalidArgument("--cuda-alloc " + args.cuda_alloc + " needs --memory cuda");
  }
  if (args.memory == "cuda" && cuda::DeviceCount() == 0) {
    return InvalidArgument("--memory cuda: no CUDA device is visible here (no GPU, no driver, or "
                           "CUDA_VISIBLE_DEVICES hides them); use --memory host");
  }
  return Status::Ok();
}

// The local processes of a run: every rank runs `ferry run` again, taking its node from the
// topology (the processes share this host), with the transports' defaults for one machine unless
// the caller chose otherwise. On CUDA memory UCX may also use its CUDA transports (ucx.cuda=auto
// still asks UCX whether it has them): UCX_TLS=sm,tcp alone would leave it no memory type but host.
LaunchOptions LocalLaunch(const RunArgs& args, int ranks) {
  LaunchOptions launch;
  RunArgs rank_args = args;
  rank_args.pretend_nodes = true;
  launch.argv = RunArgv(rank_args);
  launch.ranks = ranks;
  launch.timeout_seconds = args.timeout_seconds;
  launch.replace_failed = args.recover;
  launch.max_replacements = args.max_replacements;
  launch.launcher_hosts_store = args.store_host == "launcher";
  const std::pair<const char*, const char*> local_defaults[] = {
      {"FERRY_TCP_ADDRESS", "127.0.0.1"},
      {"FERRY_UCX_TLS", args.memory == "cuda" ? "sm,tcp,cuda_copy,cuda_ipc" : "sm,tcp"},
      {"FERRY_LIBFABRIC_DOMAIN", "lo"},
      {"FERRY_LIBFABRIC_WATCH_HOST", "127.0.0.1"},
  };
  for (const auto& [name, value] : local_defaults) {
    if (std::getenv(name) == nullptr) launch.environment.emplace_back(name, value);
  }
  return launch;
}

}  // namespace

int RunCommand(const RunArgs& args) {
  if (LaunchedAsRank()) return RunRank(args);
  if (Status s = CheckFaultOptions(args); !s.ok()) {
    std::fprintf(stderr, "ferry run: %s\n", s.message().c_str());
    return 1;
  }
  Result<RefitInputs> in = BuildRefitInputs(args);
  Status checked = in.ok() ? CheckRunArgs(args, *in) : in.status();
  if (!checked.ok()) {
    std::fprintf(stderr, "ferry run: %s\n", checked.message().c_str());
    return 1;
  }
  if (!args.label.empty()) std::printf("%s\n", args.label.c_str());
  std::printf("ferry run: %s\n  %d local processes, %s memory, transport %s, %s%s\n",
      in->description.c_str(), in->ranks, args.memory.c_str(), args.transport.c_str(),
      args.strategies.size() == 2 ? "reshard then gather-broadcast" :
                                    std::string(StrategyName(args.strategies[0])).c_str(),
      args.verify ? ", verified" : "");
  std::fflush(stdout);
  Result<LaunchResult> result = LaunchLocalRanks(LocalLaunch(args, in->ranks));
  if (!result.ok()) {
    std::fprintf(stderr, "ferry run: %s\n", result.status().message().c_str());
    return 1;
  }
  if (!result->ok()) {
    std::fprintf(stderr, "ferry run: failed: %s\n",
                 result->Describe(args.timeout_seconds).c_str());
    return 1;
  }
  for (const RankExit& e : result->replaced) {
    std::printf("ferry run: completed with rank %d replaced (a process of it %s)\n", e.rank,
                e.signaled ? ("died of signal " + std::to_string(e.signal)).c_str()
                           : ("exited with status " + std::to_string(e.exit_code)).c_str());
  }
  return 0;
}

namespace {

// `ferry run`'s own options (the shared ones: AddCommonOptions).
void AddRunOptions(CLI::App& run, RunArgs& args) {
  run.add_option("--model", args.model,
                 "model preset (ferry layout --list-models) or a Hugging Face config.json, or its "
                 "directory");
  run.add_option("--scale", args.scale, "shrink the preset's wide dims, e.g. 1/64");
  run.add_option("--src", args.source_spec, "source framework spec, e.g. megatron:tp=2,ep=2");
  run.add_option("--dst", args.destination_spec, "destination spec, e.g. vllm:tp=2,dp=2");
  run.add_option("--src-layout", args.source_layout_file, "source layout file (YAML/JSON)");
  run.add_option("--dst-layout", args.destination_layout_file, "destination layout file");
  run.add_flag("--colocated", args.colocated, "destination on the source's ranks");
  run.add_option("--gpus-per-node", args.gpus_per_node, "ranks per node in the topology");
  run.add_option("--dst-dtype", args.destination_dtype,
                 "destination weights (>= 2-dim bf16/fp16 tensors) in this dtype: fp8_e4m3, "
                 "fp8_e5m2, bf16, fp16 or fp32; the plan converts");
  run.add_flag("--verify", args.verify, "check every destination byte after each strategy");
  run.add_flag("--leak-check", args.leak_check,
               "fail when open fds or RSS (> 2 MiB) grow over the measured refits");
  run.add_option("--inject-fault", args.inject_fault,
                 "make a rank fail: <rank>:<kill|stop>:<mid|between|mid=N|verify=N|after=N> (N: a measured refit, "
                 "from 1) or <rank>:corrupt:verify; several separated by commas; as FERRY_INJECT_FAULT "
                 "(docs/faults.md)");
  run.add_flag("--recover", args.recover,
               "after a failed refit, replace a rank whose process died (any rank, as often as it fails, up to "
               "--max-replacements), move every rank to the next epoch and go on with the remaining refits, "
               "each verified with --verify");
  run.add_option("--max-replacements", args.max_replacements,
                 "with --recover: replacement processes the launcher may start in all (default 4)")
      ->check(CLI::Range(1, kMaxReplacements));
}

// The demo's transport and memory: UCX shared memory between the local processes (UCX 1.13's
// shared-memory transports cannot detect a dead peer, so they need error mode 'none'; the local
// launcher's deadline still ends every rank if one dies; --set ucx.tls=... / ucx.error_mode=...
// choose otherwise), and CUDA memory where a GPU is visible.
void PrepareDemo(RunArgs& args) {
  if (args.transport == "ucx") {
    const bool tls_chosen = std::getenv("FERRY_UCX_TLS") != nullptr ||
                            std::any_of(args.settings.begin(), args.settings.end(),
                                        [](const std::string& s) { return s.rfind("ucx.tls=", 0) == 0; });
    if (!tls_chosen) {
      args.settings.push_back("ucx.tls=sm");
      args.settings.push_back("ucx.error_mode=none");
    }
  }
  args.label = "ferry demo: a verified refit on this machine, reshard vs gather-and-broadcast";
  if (cuda::DeviceCount() > 0) {
    args.memory = "cuda";
    args.label += ", on CUDA memory (" + cuda::DeviceName(0) + ")";
  } else {
    args.label += ", on host memory: no CUDA device is visible here";
  }
}

// `ferry demo`: the main job, Qwen3-30B-A3B (scaled) Megatron TP2xEP2 -> vLLM TP2xDP2.
void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto demo_args = std::make_shared<RunArgs>();
  demo_args->model = "qwen3-30b-a3b";
  demo_args->scale = "1/16";
  demo_args->source_spec = "megatron:tp=2,ep=2";
  demo_args->destination_spec = "vllm:tp=2,dp=2";
  demo_args->transport = "ucx";
  demo_args->iterations = 2;
  demo_args->warmup = 1;
  demo_args->verify = true;
  demo_args->timeout_seconds = 120;
  auto demo_strategy = std::make_shared<std::string>("both");
  CLI::App* demo = app.add_subcommand(
      "demo", "the main job: Qwen3-30B-A3B (scaled) Megatron TP2xEP2 -> vLLM TP2xDP2 on 8 local "
              "processes, reshard then gather-and-broadcast on the same transport, verified");
  demo->add_option("--scale", demo_args->scale, "shrink the model's wide dims");
  AddCommonOptions(*demo, *demo_args, *demo_strategy);
  demo->callback([demo_args, demo_strategy, exit_code] {
    if (Status s = ApplyStrategy(*demo_strategy, *demo_args); !s.ok()) {
      std::fprintf(stderr, "ferry demo: --strategy: %s\n", s.message().c_str());
      *exit_code = 1;
      return;
    }
    PrepareDemo(*demo_args);
    *exit_code = RunCommand(*demo_args);
  });
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto strategy = std::make_shared<std::string>("reshard");
  CLI::App* run = app.add_subcommand(
      "run", "a real refit on host memory (CUDA memory with --memory cuda): one process per rank "
             "here (or one rank under torchrun/mpirun/srun), its sources filled with a deterministic "
             "pattern that --verify checks in every destination");
  AddRunOptions(*run, *args);
  AddCommonOptions(*run, *args, *strategy);
  run->callback([args, strategy, exit_code] {
    if (Status s = ApplyStrategy(*strategy, *args); !s.ok()) {
      std::fprintf(stderr, "ferry run: --strategy: %s\n", s.message().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = RunCommand(*args);
  });
  AddDemoCommand(app, exit_code);
}

}  // namespace ferry::cli
