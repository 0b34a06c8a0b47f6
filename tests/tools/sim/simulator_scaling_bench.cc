// Simulator speed against plan size: the CPU time and peak memory of `ferry simulate`'s reshard
// simulation (planner output, default window) on the model presets' framework layouts, from 128 to
// 4096 GPUs, each case in a fresh child process so that its peak RSS is its own.
//   bazel build -c opt //tests/tools/sim:simulator_scaling_bench
//   taskset -c 0 bazel-bin/tests/tools/sim/simulator_scaling_bench             # every case
//   bazel-bin/tests/tools/sim/simulator_scaling_bench --case ds-256 [--window N] # one case
//   ... [--staging BYTES]   the staging budget per rank (default 1 GiB as the executor's; 0: none)
//   ... [--rate-slack F]    SimOptions::rate_slack (default 0.01; 0: recompute every touched link)
//   ... [--post S]          ClusterSpec::op_post_overhead in seconds (default the preset's; 0: no
//                           posting lane), to see what the lane costs the simulator
// One line per case: GPUs, messages, simulator events, flow-class rate updates per message
// (SimResult::num_class_updates) and the most classes on one link (peak), the simulator's thread
// CPU seconds and CPU per message, the child's peak RSS (the larger of planning, with the layouts,
// and simulating, with the plan), the predicted time, and a digest of every op's end time (to check
// that two builds predict the same, bit for bit).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "planner/planner.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/framework_spec.h"
#include "tools/models/presets.h"
#include "tools/sim/cluster.h"
#include "tools/sim/simulator.h"

namespace ferry::sim {
namespace {

struct Case {
  const char* name;
  const char* model;
  const char* source;
  const char* destination;
};

// DeepSeek-V3 weak scaling as docs/simulator.md's "ferry at scale" (every destination node needs
// the same quarter of the model), then Kimi-K2 at 4096 GPUs, then DeepSeek-V3 256 -> 256 as the
// calibration case (NeMo RL's recipe: vLLM engines TP-shard every expert, no EP). (Qwen3-235B-A22B
// at 4096 GPUs, TP8 engines, is left out: it takes about 4 minutes of CPU and 6 GB.)
const Case kCases[] = {
    {"ds-64", "deepseek-v3", "megatron:pp=16,ep=4,first=3,last=2", "vllm:tp=32,ep=32,engines=2"},
    {"ds-128", "deepseek-v3", "megatron:pp=16,ep=8,first=3,last=2", "vllm:tp=32,ep=32,engines=4"},
    {"ds-256", "deepseek-v3", "megatron:pp=16,ep=16,first=3,last=2", "vllm:tp=32,ep=32,engines=8"},
    {"ds-512", "deepseek-v3", "megatron:pp=16,ep=32,first=3,last=2", "vllm:tp=32,ep=32,engines=16"},
    {"ds-1024", "deepseek-v3", "megatron:pp=16,ep=64,first=3,last=2", "vllm:tp=32,ep=32,engines=32"},
    {"ds-2048", "deepseek-v3", "megatron:pp=16,ep=128,first=3,last=2", "vllm:tp=32,ep=32,engines=64"},
    {"kimi-2048", "kimi-k2", "megatron:pp=16,ep=128,first=3,last=2", "vllm:tp=32,ep=32,engines=64"},
    {"ds-256-recipe", "deepseek-v3", "megatron:pp=16,ep=16,first=3,last=2", "vllm:tp=32,engines=8"},
};

double ThreadCpuSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// A case's reshard plan and the rank mapping its simulation reads.
struct PlannedCase {
  PlanResult planned;
  RankMapping mapping;
  int num_ranks = 0;
};

// Plans the case's reshard on `cluster` as `ferry simulate` does. The refit layouts live for this
// call only: the simulator reads the plan, so a case's peak RSS is the planner's (with the
// layouts) or the simulator's (with the plan), never both with the layouts.
Result<PlannedCase> PlanCase(const Case& c, const ClusterSpec& cluster) {
  FERRY_ASSIGN_OR_RETURN(models::ModelPreset preset, models::MakePreset(c.model));
  FERRY_ASSIGN_OR_RETURN(models::FrameworkSpec src, models::ParseFrameworkSpec(c.source));
  FERRY_ASSIGN_OR_RETURN(models::FrameworkSpec dst, models::ParseFrameworkSpec(c.destination));
  models::RefitOptions refit_options;
  refit_options.gpus_per_node = cluster.RanksPerNode();
  FERRY_ASSIGN_OR_RETURN(models::RefitLayouts refit,
                         models::BuildRefitLayouts(preset, src, dst, refit_options));
  const Topology topology = TopologyForCluster(cluster, refit.topology.NumRanks());
  FERRY_ASSIGN_OR_RETURN(RankMapping mapping, RankMapping::FromTopology(topology, cluster));
  FERRY_ASSIGN_OR_RETURN(PlanResult planned,
                         MakePlan(Strategy::kReshard, refit.source, refit.destination, topology));
  return PlannedCase{std::move(planned), std::move(mapping), topology.NumRanks()};
}

// Plans the case's reshard on dgx-h100 as `ferry simulate` does, simulates it with `window`, and
// prints its line (without the RSS, which the parent adds). Returns the process exit code.
int RunCase(const Case& c, int window, int64_t staging, double slack, double post) {
  auto fail = [&c](const Status& s) {
    std::fprintf(stderr, "%s: %s\n", c.name, s.ToString().c_str());
    return 1;
  };
  Result<ClusterSpec> cluster = ClusterPreset("dgx-h100");
  if (!cluster.ok()) return fail(cluster.status());
  if (post >= 0) cluster->op_post_overhead = post;
  Result<PlannedCase> planned = PlanCase(c, *cluster);
  if (!planned.ok()) return fail(planned.status());
  SimOptions options;
  options.record_op_times = true;
  options.max_in_flight = window;
  options.staging_budget = staging;
  options.rate_slack = slack;
  const double cpu0 = ThreadCpuSeconds();
  Result<SimResult> r = Simulate(planned->planned.plan, *cluster, planned->mapping, options);
  const double cpu = ThreadCpuSeconds() - cpu0;
  if (!r.ok()) return fail(r.status());
  double digest = 0;
  for (const OpTime& t : r->op_times) digest += t.end;
  const double messages = static_cast<double>(r->num_messages);
  std::printf("%-13s %6d %10lld %11lld %9.1f %5d %9.3f %9.2f", c.name, planned->num_ranks,
              static_cast<long long>(r->num_messages), static_cast<long long>(r->num_events),
              static_cast<double>(r->num_class_updates) / messages, r->peak_link_classes, cpu,
              cpu / messages * 1e6);
  std::printf(" %%RSS%% %.9f %.17g\n", r->total_time, digest);
  return 0;
}

// Runs `--case name` in a child process and prints its line with the child's peak RSS.
bool RunChild(const char* self, const Case& c, const std::string& window, const std::string& staging,
              const std::string& slack, const std::string& post) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(self, self, "--case", c.name, "--window", window.c_str(), "--staging", staging.c_str(),
            "--rate-slack", slack.c_str(), "--post", post.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  const size_t mark = out.find("%RSS%");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || mark == std::string::npos) {
    std::printf("%-13s failed\n", c.name);
    return false;
  }
  char rss[32];
  std::snprintf(rss, sizeof rss, "%8.0f", static_cast<double>(usage.ru_maxrss) / 1024.0);
  out.replace(mark, 5, rss);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return true;
}

int Main(int argc, char** argv) {
  std::string only;
  std::string window = std::to_string(SimOptions{}.max_in_flight);
  std::string staging = std::to_string(SimOptions{}.staging_budget);
  std::string slack = std::to_string(SimOptions{}.rate_slack);
  std::string post = "-1";  // the preset's
  const std::pair<const char*, std::string*> options[] = {
      {"--case", &only}, {"--window", &window}, {"--staging", &staging}, {"--rate-slack", &slack}, {"--post", &post}};
  for (int i = 1; i < argc; i += 2) {
    std::string* value = nullptr;
    for (const auto& [name, target] : options) {
      if (std::strcmp(argv[i], name) == 0) value = target;
    }
    if (value == nullptr || i + 1 == argc) {
      std::fprintf(stderr, "%s: %s\nusage: %s [--case NAME] [--window N] [--staging BYTES] [--rate-slack F] [--post S]\n",
                   argv[0], value == nullptr ? ("unknown argument " + std::string(argv[i])).c_str()
                                             : (std::string(argv[i]) + " needs a value").c_str(),
                   argv[0]);
      return 2;
    }
    *value = argv[i + 1];
  }
  char* end = nullptr;
  const long window_value = std::strtol(window.c_str(), &end, 10);
  if (end == window.c_str() || *end != '\0' || window_value < 0 || window_value > (1 << 30)) {
    std::fprintf(stderr, "--window %s: expected a message count >= 0 (0: unlimited)\n",
                 window.c_str());
    return 2;
  }
  const long long staging_value = std::strtoll(staging.c_str(), &end, 10);
  if (end == staging.c_str() || *end != '\0' || staging_value < 0) {
    std::fprintf(stderr, "--staging %s: expected bytes >= 0 (0: unlimited)\n", staging.c_str());
    return 2;
  }
  const double slack_value = std::strtod(slack.c_str(), &end);
  if (end == slack.c_str() || *end != '\0' || !(slack_value >= 0 && slack_value < 1)) {
    std::fprintf(stderr, "--rate-slack %s: expected a fraction in [0, 1)\n", slack.c_str());
    return 2;
  }
  const double post_value = std::strtod(post.c_str(), &end);
  if (end == post.c_str() || *end != '\0' || !std::isfinite(post_value)) {
    std::fprintf(stderr, "--post %s: expected seconds (negative: the preset's)\n", post.c_str());
    return 2;
  }
  for (const Case& c : kCases) {
    if (!only.empty() && only == c.name) {
      return RunCase(c, static_cast<int>(window_value), static_cast<int64_t>(staging_value),
                     slack_value, post_value);
    }
  }
  if (!only.empty()) {
    std::fprintf(stderr, "unknown case %s\n", only.c_str());
    return 2;
  }
  std::printf(
      "window %s, staging budget %s bytes, rate slack %s, op_post_overhead %s s (-1: the preset's); "
      "dgx-h100; reshard plan; one child process a case\n",
      window.c_str(), staging.c_str(), slack.c_str(), post.c_str());
  std::printf("%-13s %6s %10s %11s %9s %5s %9s %9s %8s %12s %s\n", "case", "GPUs", "messages",
              "events", "upd/msg", "peak", "sim_cpu_s", "us/msg", "rss_MiB", "predicted_s", "digest");
  bool ok = true;
  for (const Case& c : kCases) ok = RunChild(argv[0], c, window, staging, slack, post) && ok;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace ferry::sim

int main(int argc, char** argv) { return ferry::sim::Main(argc, argv); }
