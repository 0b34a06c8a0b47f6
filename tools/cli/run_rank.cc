// One rank of `ferry run`: plans, session, buffers, the variants' refits, verification, report.
#include "tools/cli/run_rank.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include "core/base/element_fn.h"
#include "core/base/strings.h"
#include "core/cuda/batched_copy.h"
#include "core/plan/export.h"
#include "core/refit/refit.h"
#include "core/runtime/bootstrap.h"
#include "core/runtime/session.h"
#include "tools/cli/cli_config.h"
#include "tools/cli/device_buffers.h"
#include "tools/cli/fault_injection.h"
#include "tools/cli/pattern_checksum.h"
#include "tools/cli/host_buffers.h"
#include "tools/cli/refit_pattern.h"
#include "tools/cli/run_recovery.h"
#include "tools/cli/run_report.h"
#include "tools/cli/start_instant.h"

namespace ferry::cli {

void ReportRankFailure(const Status& failure) {
  const char* rank = std::getenv("RANK");
  std::fprintf(stderr, "ferry run: rank %s: %s\n", rank != nullptr ? rank : "?", failure.ToString().c_str());
}

namespace {

using Clock = std::chrono::steady_clock;

// Rank 0's progress and report lines: flushed at once so they interleave sanely with other
// ranks' errors on a shared terminal.
void Say(const char* format, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

// Prints "still running" lines every few seconds while a long refit blocks rank 0.
class Ticker {
 public:
  Ticker(bool enabled, std::string what) : what_(std::move(what)) {
    if (!enabled) return;
    thread_ = std::thread([this] {
      const auto start = Clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return done_; })) {
        Say("    ... %s running, %.0f s\n", what_.c_str(), std::chrono::duration<double>(Clock::now() - start).count());
      }
    });
  }
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

int64_t OpenFileDescriptors() {
  int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd"); it != std::filesystem::directory_iterator();
       ++it) {
    ++n;
  }
  return n;
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// Whether --leak-check bounds the growth of resident memory. Not under AddressSanitizer: its
// quarantine holds freed memory by design (and LeakSanitizer checks the heap at exit instead).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCheckResidentGrowth = false;
#else
constexpr bool kCheckResidentGrowth = true;
#endif

}  // namespace

Result<Config> RankConfig(const RunArgs& args) {
  ConfigArgs config_args{args.config_file,
                         {"transport.network=" + args.transport, "transport.intra_node=" + args.transport}};
  config_args.settings.insert(config_args.settings.end(), args.settings.begin(), args.settings.end());
  FERRY_ASSIGN_OR_RETURN(Config config, LoadConfig(config_args));
  FERRY_ASSIGN_OR_RETURN(double refit_seconds, config.GetSeconds("deadline.refit"));
  if (config.SourceOf("deadline.refit") == "default" && refit_seconds > args.timeout_seconds) {
    FERRY_RETURN_IF_ERROR(config.Set("deadline.refit", std::to_string(args.timeout_seconds) + "s"));
  }
  return config;
}

namespace {

// What the run compares. With both strategies and direct reads on, reshard runs twice: as
// configured, and through the transport alone like the baseline, so that the report can tell the
// two effects apart.
std::vector<RunVariant> Variants(const RunArgs& args, bool direct_reads) {
  const bool both = args.strategies.size() == 2;
  std::vector<RunVariant> variants;
  for (Strategy strategy : args.strategies) {
    if (strategy == Strategy::kReshard) {
      variants.push_back({"reshard", strategy, direct_reads});
      if (both && direct_reads) variants.push_back({"reshard (transport only)", strategy, false});
    } else {
      variants.push_back({std::string(StrategyName(strategy)), strategy, both ? false : direct_reads});
    }
  }
  return variants;
}

// Everything one rank's refits share.
struct RankContext {
  const RunArgs& args;
  const RefitInputs& in;
  int rank = 0, size = 0;
  Session& session;
  HostBuffers& sources;       // the buffers (--memory host) or their host mirrors (cuda)
  HostBuffers& destinations;
  int64_t delivered = 0;       // bytes of the destination layout's fragments
  DeviceBuffers* device_sources = nullptr;  // --memory cuda: the buffers the refit moves
  DeviceBuffers* device_destinations = nullptr;
  double store_seconds = 60;   // the config's deadline.store
  std::vector<Fault> faults{};  // --inject-fault or FERRY_INJECT_FAULT
  RecoveryContext* recovery = nullptr;  // --recover
  // The refit whose Run this rank started last ({-1, -1}: none yet), which a recovery needs to
  // know whether the destinations hold that refit's attempt (Resumption).
  RunPoint* last_run = nullptr;
  StartMargin* start_margin = nullptr;  // rank 0's margin before each refit's start instant
  Deadline store_deadline() const { return Deadline::AfterSeconds(store_seconds); }
  // A barrier behind which other ranks do work that grows with their bytes (filling and uploading
  // the sources, a refit's Run, which a receiver that quantizes ends long after its senders,
  // verifying the destinations) may wait as long as the whole run may take (--timeout, after
  // which the launcher kills every rank): deadline.store would fail a model whose fill or fp8
  // check takes a minute. A rank that dies meanwhile still ends the wait at once.
  Deadline local_work_deadline() const { return Deadline::AfterSeconds(args.timeout_seconds); }
  // Per-refit verification: with --recover every refit after a fault is checked on its own.
  bool verify_each() const { return args.verify && args.recover; }
};

Status RegisterBuffers(Refit& refit, const RankContext& c) {
  const Layout& source = refit.plan().source();
  const Layout& destination = refit.plan().destination();
  for (size_t b = 0; b < source.buffers.size(); ++b) {
    if (source.buffers[b].rank != c.rank) continue;
    const MemoryDesc desc = c.device_sources != nullptr ? c.device_sources->Desc(b) : c.sources.Desc(b);
    FERRY_RETURN_IF_ERROR(refit.RegisterSource(static_cast<int>(b), desc));
  }
  for (size_t b = 0; b < destination.buffers.size(); ++b) {
    if (destination.buffers[b].rank != c.rank) continue;
    const MemoryDesc desc =
        c.device_destinations != nullptr ? c.device_destinations->Desc(b) : c.destinations.Desc(b);
    FERRY_RETURN_IF_ERROR(refit.RegisterDestination(static_cast<int>(b), desc));
  }
  return Status::Ok();
}

// After a failed Run: how many of the destination tensors this rank holds it wrote whole
// (Refit::CompleteDestinationTensors), for the error; empty on a rank that holds none.
std::string CompleteTensorsNote(const Refit& refit, int rank) {
  std::set<int> held;
  for (const Fragment& f : refit.plan().destination().fragments) {
    if (f.loc.rank == rank) held.insert(f.tensor);
  }
  if (held.empty()) return "";
  return " (" + std::to_string(refit.CompleteDestinationTensors().size()) + " of its " +
         std::to_string(held.size()) + " destination tensors complete)";
}

// One refit of `variant` on every rank, started at an instant all agree on; rank 0 gets the
// aggregate and adapts its margin to it. `rest`: the refit at `at` is resumed after a recovery
// (Refit::RunRest, only what its failed attempt left undelivered) rather than run whole.
Result<RefitSample> RunOnce(const RankContext& c, const RunVariant& variant, Refit& refit, const std::string& key,
                            const std::string& what, const RunPoint& at, bool rest) {
  const int64_t margin_ns = c.rank == 0 ? c.start_margin->nanos() : 0;
  Result<StartInstant> start =
      AgreeOnStart(c.session.store(), key, c.rank, margin_ns, c.store_deadline(), [&](const std::string& name) {
        // key/start ends each rank's own work before the refit (binding and registering buffers,
        // the previous refit's verification), which may take far longer than a store round trip
        // on a loaded machine; key/instant follows it at once.
        const bool after_local_work = name == key + "/start";
        return c.session.communicator().Barrier(name, after_local_work ? c.local_work_deadline()
                                                                       : c.store_deadline());
      });
  if (!start.ok()) return start.status().WithContext("agreeing on the start of " + what);
  RankSample sample;
  sample.instant_ns = start->instant_ns;
  sample.known_ns = start->known_ns;
  {
    Ticker ticker(c.rank == 0, what);
    SleepUntil(start->instant_ns);
    sample.start_ns = WallNanos();
    *c.last_run = at;
    Result<RefitStats> stats = rest ? refit.RunRest(refit.DefaultDeadline()) : refit.Run();
    sample.end_ns = WallNanos();
    if (!stats.ok()) {
      return stats.status().WithContext("rank " + std::to_string(c.rank) + ": " + what +
                                        CompleteTensorsNote(refit, c.rank));
    }
    sample.bytes_sent = stats->executor.bytes_sent;
    sample.bytes_copied = stats->executor.bytes_copied;
    sample.bytes_read_direct = stats->executor.bytes_read_direct;
    sample.bytes_quantized_direct = stats->executor.bytes_quantized_direct;
    sample.bytes_read_packed = stats->executor.bytes_read_packed;
    sample.bytes_delivered = stats->bytes_delivered;
    sample.peak_staging = stats->executor.peak_staging_bytes;
    sample.executor_seconds = stats->executor.seconds;
    sample.by_transport = stats->executor.by_transport;
  }
  FERRY_ASSIGN_OR_RETURN(RefitSample all,
                         ShareSample(c.session.store(), key, c.rank, c.size, sample, c.store_deadline(), [&] {
                           return c.session.communicator().Barrier(key + "/published", c.local_work_deadline());
                         }));
  all.resumed = rest;
  if (c.rank == 0 && rest) {
    Say("  %-24s %-20s %10s  resumed: delivered %s of its %s (%lld of %lld bytes), the rest was in place\n",
        variant.name.c_str(), what.substr(variant.name.size() + 1).c_str(),
        FormatSeconds(all.seconds, 1, false).c_str(), FormatBytes(static_cast<double>(all.bytes_delivered)).c_str(),
        FormatBytes(static_cast<double>(c.delivered)).c_str(), static_cast<long long>(all.bytes_delivered),
        static_cast<long long>(c.delivered));
  } else if (c.rank == 0) {
    c.start_margin->Observe(static_cast<int64_t>(all.start_slack_seconds * 1e9));
    Say("  %-24s %-20s %10s  %7.2f GB/s\n", variant.name.c_str(), what.substr(variant.name.size() + 1).c_str(),
        FormatSeconds(all.seconds, 1, false).c_str(),
        static_cast<double>(c.delivered) / all.seconds / 1e9);
  }
  return all;
}

// --leak-check: open fds must not grow, nor resident memory by more than 2 MiB.
struct LeakProbe {
  int64_t fds = OpenFileDescriptors(), rss = ResidentBytes();
};

Status CheckLeaks(const RankContext& c, const RunVariant& variant, const LeakProbe& before) {
  const LeakProbe after;
  if (after.fds > before.fds || (kCheckResidentGrowth && after.rss - before.rss > (int64_t{2} << 20))) {
    return Internal("rank " + std::to_string(c.rank) + ": " + variant.name + " leaks across " +
                    std::to_string(c.args.iterations) + " refits: open fds " + std::to_string(before.fds) + " -> " +
                    std::to_string(after.fds) + ", RSS " + FormatBytes(static_cast<double>(before.rss)) + " -> " +
                    FormatBytes(static_cast<double>(after.rss)));
  }
  if (c.rank == 0) {
    Say("  %-24s leak check over %d refits: open fds %lld -> %lld, RSS %s -> %s (rank 0)%s\n", variant.name.c_str(),
        c.args.iterations, static_cast<long long>(before.fds), static_cast<long long>(after.fds),
        FormatBytes(static_cast<double>(before.rss)).c_str(), FormatBytes(static_cast<double>(after.rss)).c_str(),
        kCheckResidentGrowth ? "" : "; RSS not bounded under AddressSanitizer");
  }
  return Status::Ok();
}

// This rank's destination check: on the GPU by fragment checksums when the destinations are CUDA
// memory (the bytes stay there; only after a mismatch are they copied down, so that the host check
// names the first wrong element), else element by element on the host. A destination with
// block-scaled fp8 buffers is copied down and checked on the host (VerifyBlockScaled).
Result<int64_t> CheckDestinations(const RankContext& c) {
  const RankBuffers host{c.rank, c.destinations.pointers()};
  if (c.device_destinations == nullptr) return VerifyPattern(c.in.destination, host, &c.in.source);
  if (!c.in.destination.block_scaled.empty()) {  // the fp8 values and scales are checked on the host
    FERRY_RETURN_IF_ERROR(c.device_destinations->Download(c.destinations).WithContext("copying destinations down"));
    return VerifyPattern(c.in.destination, host, &c.in.source);
  }
  Result<int64_t> on_device =
      VerifyPatternOnDevice(c.in.destination, RankBuffers{c.rank, c.device_destinations->pointers()}, &c.in.source);
  if (on_device.ok() || on_device.status().code() != StatusCode::kInternal) return on_device;
  FERRY_RETURN_IF_ERROR(c.device_destinations->Download(c.destinations).WithContext("copying destinations down"));
  Result<int64_t> on_host = VerifyPattern(c.in.destination, host, &c.in.source);
  if (on_host.ok()) return on_device.status();
  return Internal(on_device.status().message() + "; first wrong element: " + on_host.status().message());
}

// Every rank checks its destination bytes against the pattern; rank 0 gathers the verdicts.
// `what` names the refit(s) checked; `key` makes the verdicts' store keys unique to them.
Status Verify(const RankContext& c, const RunVariant& variant, const std::string& what, const std::string& key) {
  const auto start = Clock::now();
  const bool on_device = c.device_destinations != nullptr;
  for (const Fault& fault : c.faults) {
    FERRY_RETURN_IF_ERROR(MaybeCorrupt(fault, c.rank, c.in.destination,
                                       on_device ? c.device_destinations->pointers() : c.destinations.pointers(),
                                       on_device).status());
  }
  Result<int64_t> checked = CheckDestinations(c);
  const std::string prefix = key + "/verify/rank";
  const std::string value = checked.ok() ? "ok " + std::to_string(*checked) : "fail " + checked.status().message();
  FERRY_RETURN_IF_ERROR(c.session.store().Set(
      prefix + std::to_string(c.rank),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()), c.store_deadline()));
  // Every verdict is in before rank 0 reads them; a rank that dies before its verdict aborts this
  // wait (rank 0 would otherwise wait out deadline.store for it).
  FERRY_RETURN_IF_ERROR(c.session.communicator().Barrier(key + "/verified", c.local_work_deadline()));
  if (!checked.ok()) return checked.status().WithContext(variant.name);
  if (c.rank != 0) return Status::Ok();
  int64_t bytes = 0;
  for (int r = 0; r < c.size; ++r) {
    FERRY_ASSIGN_OR_RETURN(Bytes v, c.session.store().Get(prefix + std::to_string(r), c.store_deadline()));
    const std::string text(v.begin(), v.end());
    if (text.rfind("ok ", 0) != 0) {
      return Internal(variant.name + ": rank " + std::to_string(r) + " failed verification: " + text.substr(5));
    }
    bytes += std::atoll(text.c_str() + 3);
  }
  const bool quantized = !c.in.destination.block_scaled.empty();
  const bool ue8m0 = std::any_of(c.in.destination.block_scaled.begin(), c.in.destination.block_scaled.end(),
                                 [](const BlockScaledBuffer& s) { return Fp8ScaleIsUe8m0(s.scale_fmt); });
  const bool element_fns = std::any_of(
      c.in.destination.transforms.begin(), c.in.destination.transforms.end(),
      [](const StoredTransform& x) { return ElementFnOfTransform(x.transform) != ElementFn::kNone; });
  // The host checks against std::exp, the GPU against its own expf (core/base/element_fn.h).
  const char* transformed = !element_fns                        ? ""
                            : c.device_destinations != nullptr ? ", A = -exp(A_log) to the GPU's expf"
                                                               : ", A = -exp(A_log) to the CPU reference (std::exp)";
  Say("  %-24s verified %s on %d ranks: %s%s%s%s%s (%.2f s)\n", what.c_str(),
      FormatBytes(static_cast<double>(bytes)).c_str(), c.size,
      c.in.weights_converted ? "bit-exact to the CPU conversion reference" : "bit-exact", transformed,
      quantized ? ", fp8 values and scales to the CPU block-quantization reference" : "",
      ue8m0 ? " (UE8M0 scales where the layout asks)" : "",
      c.device_destinations != nullptr && !quantized ? ", by fragment checksums on the GPU" : "",
      std::chrono::duration<double>(Clock::now() - start).count());
  return Status::Ok();
}

// `failure`, unless the communicator aborted: then nothing this process holds is needed by anyone.
// Its peers heard the cause before its links closed (Communicator::Abort announces first), none
// waits on it, and the store is not its own (the launcher's or `ferry store`; a rank 0 that hosts
// it ends the job either way). So it reports the failure and exits at once, leaving transports,
// threads, the store connection and its buffers to the kernel instead of tearing them down first.
Status ExitIfAborted(Session& session, Status failure) {
  if (failure.ok() || !session.communicator().aborted()) return failure;
  ReportRankFailure(failure);
  std::fflush(nullptr);
  ::_exit(1);
}

// What refit `it` of `variant` is called in progress lines ("reshard refit 3/5", "reshard warm-up 1").
std::string RefitName(const RankContext& c, const RunVariant& variant, int it) {
  if (it < c.args.warmup) return variant.name + " warm-up " + std::to_string(it + 1);
  return variant.name + " refit " + std::to_string(it - c.args.warmup + 1) + "/" + std::to_string(c.args.iterations);
}

// The injected faults of this rank, if due now (`starting` refit `it` or having finished it):
// recorded in the store first under --recover (for rank 0's report and the rank's replacement),
// then fired. A `mid` fault whose thread has not yet fired is fired as its refit finishes
// (recorded when it started).
void FaultPoint(const RankContext& c, const RunPoint& at, bool starting) {
  const int measured = at.iteration - c.args.warmup + 1;
  if (measured < 1) return;
  for (const Fault& fault : c.faults) {
    if (FaultDue(fault, c.rank, starting, measured) && c.recovery != nullptr) {
      (void)RecordFault(*c.recovery, fault, at);
    }
    MaybeInjectFault(fault, c.rank, starting, measured);
  }
}

// The verify=N faults of this rank, as refit `at`'s transfers have ended here: recorded, then fired.
void VerifyFaultPoint(const RankContext& c, const RunPoint& at) {
  const int measured = at.iteration - c.args.warmup + 1;
  if (measured < 1) return;
  for (const Fault& fault : c.faults) {
    if (FaultDueAtVerify(fault, c.rank, measured) && c.recovery != nullptr) (void)RecordFault(*c.recovery, fault, at);
    MaybeInjectAtVerify(fault, c.rank, measured);
  }
}

// One refit of a variant: zeroed destinations (--verify; not when resuming it with `rest`, whose
// destinations hold what the failed attempt delivered), the refit and its sample, and with
// --recover its own verification; the injected fault at its moment.
Result<RefitSample> RefitStep(const RankContext& c, const RunVariant& variant, Refit& refit, const RunPoint& at,
                              bool rest) {
  if (c.args.verify && !rest) {
    c.destinations.Zero();
    if (c.device_destinations != nullptr) FERRY_RETURN_IF_ERROR(c.device_destinations->Zero());
  }
  const std::string what = RefitName(c, variant, at.iteration);
  const std::string key = "run/" + variant.name + "/e" + std::to_string(c.session.communicator().epoch()) + "/" +
                          std::to_string(at.iteration);
  FaultPoint(c, at, true);
  FERRY_ASSIGN_OR_RETURN(RefitSample all, RunOnce(c, variant, refit, key, what, at, rest));
  VerifyFaultPoint(c, at);
  if (c.verify_each() && at.iteration >= c.args.warmup) {
    const std::string label = what + ", epoch " + std::to_string(c.session.communicator().epoch());
    FERRY_RETURN_IF_ERROR(Verify(c, variant, label, key));
    if (c.rank == 0) FERRY_RETURN_IF_ERROR(MarkReported(*c.recovery, at));
  }
  FaultPoint(c, at, false);
  return all;
}

// Warm-up and measured refits of one variant from `first` (a replacement process starts where
// the survivors resume), then the leak check and verification. Under --recover a refit that
// fails because the communicator aborted is followed by recovery and the run resumes where every
// rank agrees, by RunRest where it can (Resumption). `rest_first`: refit `first` is such a
// resumption. Returns on rank 0 the samples of the measured refits this process took part in
// (from `first` on; empty elsewhere), resumed ones marked.
Result<std::vector<RefitSample>> RunVariantRefits(const RankContext& c, int v, const RunVariant& variant, Refit& refit,
                                                  int first, bool rest_first) {
  std::vector<RefitSample> samples;
  const int measured_from = std::max(first, c.args.warmup);
  LeakProbe before;
  bool rest = rest_first;
  for (int it = first; it < c.args.warmup + c.args.iterations; ++it) {
    if (it == c.args.warmup) before = LeakProbe();
    const RunPoint at{v, it};
    Result<RefitSample> all = RefitStep(c, variant, refit, at, rest);
    rest = false;
    if (!all.ok()) {
      if (c.recovery == nullptr) return ExitIfAborted(c.session, all.status());
      FERRY_ASSIGN_OR_RETURN(Resumption resume, RecoverAfterFailure(*c.recovery, at, *c.last_run == at, all.status()));
      if (resume.point.variant != v) return Internal("recovery: ranks stopped in different variants");
      it = resume.point.iteration - 1;
      rest = resume.rest;
      continue;
    }
    if (it >= measured_from && c.rank == 0) {
      samples.resize(static_cast<size_t>(it - measured_from));  // drops refits done again after a recovery
      samples.push_back(*all);
    }
  }
  if (c.args.leak_check) FERRY_RETURN_IF_ERROR(CheckLeaks(c, variant, before));
  if (c.args.verify && !c.verify_each()) FERRY_RETURN_IF_ERROR(Verify(c, variant, variant.name, "run/" + variant.name));
  return samples;
}

// Binds `plan` to the session for `variant`: the session's executor when the variant runs as
// configured, else an executor of the Refit's own with direct reads switched.
Result<std::unique_ptr<Refit>> BindVariant(const RankContext& c, const RunVariant& variant,
                                           std::shared_ptr<const RefitPlan> plan) {
  FERRY_ASSIGN_OR_RETURN(ExecutorOptions options, ExecutorOptions::FromConfig(c.session.config()));
  std::unique_ptr<Refit> refit;
  if (options.direct_intra_node == variant.direct_reads) {
    FERRY_ASSIGN_OR_RETURN(refit, Refit::Create(c.session, std::move(plan)));
  } else {
    options.direct_intra_node = variant.direct_reads;
    FERRY_ASSIGN_OR_RETURN(refit, Refit::Create(c.session, std::move(plan), options));
  }
  FERRY_RETURN_IF_ERROR(RegisterBuffers(*refit, c));
  return refit;
}

// Plans every strategy of the run (each rank plans locally; planning is deterministic).
Result<std::map<Strategy, std::shared_ptr<const RefitPlan>>> PlanStrategies(const RunArgs& args, const RefitInputs& in,
                                                                            const Config& config, bool lead,
                                                                            double started) {
  auto source = std::make_shared<const Layout>(in.source);
  auto destination = std::make_shared<const Layout>(in.destination);
  std::map<Strategy, std::shared_ptr<const RefitPlan>> plans;
  for (Strategy strategy : args.strategies) {
    FERRY_ASSIGN_OR_RETURN(plans[strategy], RefitPlan::Make(source, destination, in.topology, strategy, config));
    const TransferPlan& plan = plans[strategy]->plan();
    if (!lead) continue;
    int64_t messages = 0;
    for (const Op& op : plan.ops) messages += op.kind == OpKind::kRecv ? 1 : 0;
    Say("[%5.1fs] planned %-16s %zu ops, %lld messages, %zu staging slots (%.2f s)\n", started,
        std::string(StrategyName(strategy)).c_str(), plan.ops.size(), static_cast<long long>(messages),
        plan.slots.size(), plans[strategy]->planning_seconds());
  }
  if (lead && !args.save_plan_file.empty()) {
    const RefitPlan& saved = *plans.at(args.strategies.front());
    FERRY_RETURN_IF_ERROR(WritePlanJsonFile(args.save_plan_file, saved.plan(), -1, &saved.source(),
                                            &saved.destination())
                              .WithContext("--save-plan"));
  }
  return plans;
}

// --results: one CSV row per variant, labelled with the transport and the --set options.
Status AppendResults(const RunArgs& args, int ranks, int64_t delivered, double memcpy_bps,
                     const std::vector<VariantSummary>& summaries) {
  if (args.results_file.empty()) return Status::Ok();
  std::ofstream out(args.results_file, std::ios::app);
  std::string label = args.transport;
  for (std::string setting : args.settings) {
    std::replace(setting.begin(), setting.end(), ',', '+');
    label += " " + setting;
  }
  for (const VariantSummary& s : summaries) {
    out << label << ',' << s.variant.name << ',' << ranks << ',' << delivered << ',' << s.mean << ',' << s.best
        << ',' << static_cast<double>(delivered) / s.mean / 1e9 << ',' << memcpy_bps / 1e9 << ','
        << s.last.bytes_sent << ',' << s.last.peak_staging_max << ',' << s.mean_start_spread << ',';
    const char* separator = "";
    for (const auto& [path, traffic] : s.last.by_transport) {
      out << separator << path << '=' << traffic.bytes_received;
      separator = ";";
    }
    out << '\n';
  }
  if (!out) return IoError("cannot write --results " + args.results_file);
  return Status::Ok();
}

// The ranks' nodes as the topology has them, when the local launcher pretends several nodes on
// this machine; empty (host names decide) under a real launcher.
std::vector<int> PretendedNodes(const RunArgs& args, const Topology& topology) {
  std::vector<int> nodes;
  if (!args.pretend_nodes) return nodes;
  for (int r = 0; r < topology.NumRanks(); ++r) nodes.push_back(topology.NodeOf(r));
  return nodes;
}

// --memory cuda: the rank's buffers on device rank % visible devices, sources filled from their
// host mirror.
Status AllocateDeviceBuffers(const RefitInputs& in, int rank, bool vmm, const HostBuffers& sources,
                             std::unique_ptr<DeviceBuffers>& device_sources,
                             std::unique_ptr<DeviceBuffers>& device_destinations) {
  const int devices = cuda::DeviceCount();
  if (devices == 0) return FailedPrecondition("no CUDA device is visible to this rank");
  FERRY_ASSIGN_OR_RETURN(device_sources, DeviceBuffers::Allocate(in.source.buffers, rank, rank % devices, vmm));
  FERRY_ASSIGN_OR_RETURN(device_destinations,
                         DeviceBuffers::Allocate(in.destination.buffers, rank, rank % devices, vmm));
  return device_sources->Upload(sources);
}

// Bytes per second of one device-to-device cudaMemcpy of `bytes` on this rank's device (median of
// 7 after a warm-up), the reference of a CUDA refit.
Result<double> MeasureDeviceCopy(int64_t bytes) {
  FERRY_ASSIGN_OR_RETURN(void* a, cuda::DeviceAlloc(bytes));
  Result<void*> b = cuda::DeviceAlloc(bytes);
  if (!b.ok()) {
    (void)cuda::DeviceFree(a);
    return b.status();
  }
  std::vector<double> seconds;
  Status status;
  for (int i = 0; i < 8 && status.ok(); ++i) {
    const auto start = Clock::now();
    status = cuda::CopyDeviceToDeviceAsync(*b, a, bytes, nullptr);
    if (status.ok()) status = cuda::SynchronizeStream(nullptr);
    if (i > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  (void)cuda::DeviceFree(a);
  (void)cuda::DeviceFree(*b);
  FERRY_RETURN_IF_ERROR(status);
  std::sort(seconds.begin(), seconds.end());
  return static_cast<double>(bytes) / seconds[seconds.size() / 2];
}

// The copy the report compares a refit delivering `delivered` bytes with: one cudaMemcpy D2D
// (--memory cuda) or one memcpy of MemcpyReferenceBytes(delivered), in bytes per second.
Result<double> MemcpyReference(const RunArgs& args, int64_t delivered) {
  const int64_t bytes = MemcpyReferenceBytes(delivered);
  if (args.memory == "cuda") return MeasureDeviceCopy(bytes);
  return MeasureMemcpy(bytes);
}

// Every variant's refits from `resumption` on, rank 0's report (and recovery summary), and the
// session's final barrier. `started` is the seconds since the rank started, for the last line. A
// refit resumed by RunRest moved only part of the bytes, so its time is left out of the report.
Status RunVariantsAndFinish(const RankContext& c, const std::vector<RunVariant>& variants,
                            const std::map<Strategy, std::shared_ptr<const RefitPlan>>& plans,
                            const Resumption& resumption, double memcpy_bps, double started) {
  const RunPoint& resume = resumption.point;
  const auto t0 = Clock::now();
  std::vector<VariantSummary> summaries;
  int fewest = c.args.iterations;  // measured refits in the report, per variant at least
  for (int v = resume.variant; v < static_cast<int>(variants.size()); ++v) {
    const RunVariant& variant = variants[v];
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Refit> refit, BindVariant(c, variant, plans.at(variant.strategy)));
    const int first = v == resume.variant ? resume.iteration : 0;
    FERRY_ASSIGN_OR_RETURN(std::vector<RefitSample> samples,
                           RunVariantRefits(c, v, variant, *refit, first, v == resume.variant && resumption.rest));
    if (c.rank != 0) continue;
    std::erase_if(samples, [](const RefitSample& s) { return s.resumed; });
    if (samples.empty()) {
      Say("  %-24s no whole refit measured: its last was resumed after a recovery; left out of the report\n",
          variant.name.c_str());
      continue;
    }
    summaries.push_back(Summarize(variant, samples));
    fewest = std::min(fewest, static_cast<int>(samples.size()));
  }
  if (c.rank == 0) {
    if (c.session.info().replacement) {
      Say("  (rank 0 is a replacement process: the report covers the refits from %s on)\n",
          RefitName(c, variants[resume.variant], resume.iteration).c_str());
    }
    Say("%s", FormatRunReport(c.in.description, c.delivered, memcpy_bps, summaries, fewest).c_str());
    FERRY_RETURN_IF_ERROR(AppendResults(c.args, c.size, c.delivered, memcpy_bps, summaries));
  }
  if (c.recovery != nullptr && c.rank == 0) {
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> recoveries, RecoveryLog(*c.recovery));
    Say("recovered from %zu failure(s)%s\n", recoveries.size(),
        !recoveries.empty() && c.args.verify ? "; every refit after each recovery verified" : "");
    for (const std::string& line : recoveries) Say("  %s\n", line.c_str());
  }
  FERRY_RETURN_IF_ERROR(c.session.Finish());
  if (c.rank == 0) Say("[%5.1fs] done\n", started + std::chrono::duration<double>(Clock::now() - t0).count());
  return Status::Ok();
}

}  // namespace

// Rank 0: the transports the communicator uses, and what carries each one's bytes.
void SayTransports(Session& session, double at) {
  std::string transports;
  for (Transport* t : session.communicator().transports()) {
    transports += (transports.empty() ? "" : ", ") + std::string(t->name());
  }
  Say("[%5.1fs] %d ranks joined; transports in use: %s\n", at, session.info().size, transports.c_str());
  for (Transport* t : session.communicator().transports()) {
    const std::string links = t->DescribeLinks();
    if (!links.empty()) Say("         %s links of rank 0: %s\n", std::string(t->name()).c_str(), links.c_str());
  }
}

namespace {

// Rank 0 after the buffers are filled: says so, then measures the plain-copy reference the report
// compares each refit with.
Result<double> LeadMemcpyReference(const RunArgs& args, const RefitInputs& in, int64_t delivered, double at) {
  Say("[%5.1fs] buffers allocated and filled: %s of sources, %s of destinations\n", at,
      FormatBytes(static_cast<double>(in.source.FragmentBytes())).c_str(),
      FormatBytes(static_cast<double>(delivered)).c_str());
  FERRY_ASSIGN_OR_RETURN(const double memcpy_bps, MemcpyReference(args, delivered));
  const std::string reference = FormatBytes(static_cast<double>(MemcpyReferenceBytes(delivered)));
  if (args.memory == "cuda") {
    Say("[%5.1fs] plain cudaMemcpy D2D of %s on this GPU (one process, median of 7): %.2f GB/s\n", at,
        reference.c_str(), memcpy_bps / 1e9);
  } else {
    Say("[%5.1fs] plain memcpy of %s on this machine (one thread, median of 7): %.2f GB/s\n", at,
        reference.c_str(), memcpy_bps / 1e9);
  }
  return memcpy_bps;
}

// Joins the refit's session as `info` says; rank 0 names the transports, and a rank that replaced
// a dead one prints the recovery notice.
Result<std::unique_ptr<Session>> JoinRun(const RunArgs& args, const RefitInputs& in, const BootstrapInfo& info,
                                         const Config& config, double at) {
  Result<std::unique_ptr<Session>> joined = Session::Join(info, config, PretendedNodes(args, in.topology));
  if (!joined.ok()) return joined.status().WithContext("rank " + std::to_string(info.rank) + " joining");
  if (info.rank == 0) SayTransports(**joined, at);
  if (const std::string notice = args.recover ? (*joined)->TakeRecoveryNotice() : ""; !notice.empty()) {
    std::fprintf(stderr, "%s\n", notice.c_str());
  }
  return joined;
}

// With --memory cuda, the rank's buffers on its GPU, filled from the host mirrors, in `context`.
Status PlaceOnDevice(const RefitInputs& in, RankContext& context, std::unique_ptr<DeviceBuffers>& device_sources,
                     std::unique_ptr<DeviceBuffers>& device_destinations) {
  if (context.args.memory != "cuda") return Status::Ok();
  FERRY_RETURN_IF_ERROR(AllocateDeviceBuffers(in, context.rank, context.args.cuda_alloc == "vmm", context.sources,
                                              device_sources, device_destinations)
                            .WithContext("rank " + std::to_string(context.rank) + ": --memory cuda"));
  context.device_sources = device_sources.get();
  context.device_destinations = device_destinations.get();
  return Status::Ok();
}

// What a recovery needs of this run (deadline.connect, the report's first verified refit, whether
// a refit may resume midway); `context.recovery` points at it with --recover.
Status SetUpRecovery(const Config& config, const std::vector<RunVariant>& variants, RankContext& context,
                     RecoveryContext& recovery) {
  recovery.store_seconds = context.store_seconds;
  recovery.describe = [c = &context, v = &variants](const RunPoint& p) {
    return RefitName(*c, (*v)[p.variant], p.iteration);
  };
  recovery.say = [](const std::string& line) { Say("%s\n", line.c_str()); };
  FERRY_ASSIGN_OR_RETURN(recovery.connect_seconds, config.GetSeconds("deadline.connect"));
  recovery.rest_allowed = Refit::CanRunRest(context.in.destination);
  if (context.args.recover) context.recovery = &recovery;
  if (context.verify_each()) recovery.reported_from = context.args.warmup;
  return Status::Ok();
}

}  // namespace

Status RunRankOrError(const RunArgs& args) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  FERRY_ASSIGN_OR_RETURN(BootstrapInfo info, BootstrapFromProcessEnvironment());
  const bool lead = info.rank == 0;
  FERRY_ASSIGN_OR_RETURN(RefitInputs in, BuildRefitInputs(args));
  if (info.size != in.ranks) {
    return InvalidArgument("the launcher started " + std::to_string(info.size) + " ranks but the refit needs " +
                           std::to_string(in.ranks));
  }
  FERRY_ASSIGN_OR_RETURN(Config config, RankConfig(args));
  FERRY_ASSIGN_OR_RETURN(auto plans, PlanStrategies(args, in, config, lead, elapsed()));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Session> joined, JoinRun(args, in, info, config, elapsed()));
  Session& session = *joined;
  HostBuffers sources(in.source.buffers, info.rank, "sources");
  HostBuffers destinations(in.destination.buffers, info.rank, "destinations");
  if (!sources.complete() || !destinations.complete()) {
    return Unavailable("rank " + std::to_string(info.rank) + ": out of host memory for " +
                       FormatBytes(static_cast<double>(sources.total() + destinations.total())) + " of buffers");
  }
  FERRY_RETURN_IF_ERROR(FillPattern(in.source, RankBuffers{info.rank, sources.pointers()}, &in.destination));
  RankContext context{.args = args, .in = in, .rank = info.rank, .size = info.size, .session = session,
                      .sources = sources, .destinations = destinations,
                      .delivered = in.destination.FragmentBytes()};
  StartMargin start_margin;
  context.start_margin = &start_margin;
  RunPoint last_run{-1, -1};
  context.last_run = &last_run;
  FERRY_ASSIGN_OR_RETURN(context.store_seconds, config.GetSeconds("deadline.store"));
  FERRY_ASSIGN_OR_RETURN(context.faults, args.inject_fault.empty() ? FaultsFromEnvironment()
                                                                   : ParseFaults(args.inject_fault, "--inject-fault"));
  std::unique_ptr<DeviceBuffers> device_sources, device_destinations;
  FERRY_RETURN_IF_ERROR(PlaceOnDevice(in, context, device_sources, device_destinations));
  FERRY_ASSIGN_OR_RETURN(ExecutorOptions executor_options, ExecutorOptions::FromConfig(config));
  const std::vector<RunVariant> variants = Variants(args, executor_options.direct_intra_node);
  RecoveryContext recovery{.session = session, .rank = info.rank, .size = info.size, .describe = {}, .say = {}};
  FERRY_RETURN_IF_ERROR(SetUpRecovery(config, variants, context, recovery));
  double memcpy_bps = 0;
  // A replacement process joins where the survivors resume; the start-up barriers are behind them,
  // and so are the faults its predecessors fired.
  if (info.replacement) {
    FERRY_ASSIGN_OR_RETURN(context.faults, FaultsLeft(recovery, context.faults));
    FERRY_ASSIGN_OR_RETURN(Resumption resume, JoinAsReplacement(recovery));
    if (lead) {
      FERRY_ASSIGN_OR_RETURN(memcpy_bps, MemcpyReference(args, context.delivered));
    }
    return ExitIfAborted(session, RunVariantsAndFinish(context, variants, plans, resume, memcpy_bps, elapsed()));
  }
  FERRY_RETURN_IF_ERROR(ExitIfAborted(
      session, session.communicator().Barrier("run/filled", context.local_work_deadline())));
  if (lead) {
    FERRY_ASSIGN_OR_RETURN(memcpy_bps, LeadMemcpyReference(args, in, context.delivered, elapsed()));
  }
  FERRY_RETURN_IF_ERROR(ExitIfAborted(
      session, session.communicator().Barrier("run/memcpy", context.local_work_deadline())));
  return ExitIfAborted(session, RunVariantsAndFinish(context, variants, plans, Resumption{}, memcpy_bps, elapsed()));
}

}  // namespace ferry::cli
