// `ferry run` / `ferry demo`: local launch or one launcher rank; per rank: plan, allocate, fill,
// refit through the Executor, verify; rank 0 reports.
#include "tools/cli/cmd_run.h"

#include <algorithm>
#include <cstdarg>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/base/strings.h"
#include "core/refit/config.h"
#include "core/runtime/bootstrap.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/session.h"
#include "core/runtime/transport.h"
#include "tools/cli/commands.h"
#include "tools/cli/local_launch.h"
#include "tools/cli/refit_pattern.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry::cli {
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

std::string Size(double b) {
  char buf[64];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// Durations in the run report: milliseconds even below one.
std::string Seconds(double s) { return FormatSeconds(s, 1, false); }

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t FragmentBytes(const Layout& layout) {
  int64_t n = 0;
  for (const Fragment& f : layout.fragments) {
    n += f.NumElements() * DTypeSize(layout.tensors[f.tensor].dtype);
  }
  return n;
}

// Host buffers of one side on this rank, 256-byte aligned, carved out of one block of shareable
// memory (a memfd) that same-node peers map once for direct reads (core/runtime/peer_memory.h),
// as a trainer's weights sit in a few large allocator segments in a real deployment.
class HostBuffers {
 public:
  HostBuffers(const BufferTable& specs, int rank, const char* side) {
    pointers_.assign(specs.size(), nullptr);
    offsets_.assign(specs.size(), -1);
    int64_t size = 0;
    for (size_t b = 0; b < specs.size(); ++b) {
      if (specs[b].rank != rank) continue;
      offsets_[b] = size;
      size += (std::max<int64_t>(specs[b].bytes, 1) + 255) / 256 * 256;
      total_ += specs[b].bytes;
    }
    Result<SharedHostMemory> memory = SharedHostMemory::Allocate(size, std::string("ferry-") + side);
    if (!memory.ok()) return;
    block_ = std::move(*memory);
    for (size_t b = 0; b < specs.size(); ++b) {
      if (offsets_[b] >= 0) pointers_[b] = block_.data() + offsets_[b];
    }
  }
  // True when every buffer of this rank got memory.
  bool complete(const BufferTable& specs, int rank) const {
    for (size_t b = 0; b < specs.size(); ++b) {
      if (specs[b].rank == rank && pointers_[b] == nullptr) return false;
    }
    return true;
  }
  const std::vector<char*>& pointers() const { return pointers_; }
  std::vector<MemoryDesc> Descs(const BufferTable& specs) const {
    std::vector<MemoryDesc> out(specs.size());
    for (size_t b = 0; b < specs.size(); ++b) {
      if (pointers_[b] != nullptr) out[b] = block_.Sub(offsets_[b], specs[b].bytes);
    }
    return out;
  }
  void Zero(const BufferTable& specs) {
    for (size_t b = 0; b < specs.size(); ++b) {
      if (pointers_[b] != nullptr) std::memset(pointers_[b], 0, specs[b].bytes);
    }
  }
  int64_t total() const { return total_; }

 private:
  SharedHostMemory block_;
  std::vector<char*> pointers_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
};

// One rank's numbers for one refit, passed to rank 0 through the store.
struct RankSample {
  int64_t start_ns = 0, end_ns = 0;
  int64_t bytes_sent = 0, bytes_copied = 0, peak_staging = 0, bytes_read_direct = 0;
  double executor_seconds = 0;

  std::string Encode() const {
    std::ostringstream out;
    out << start_ns << ' ' << end_ns << ' ' << bytes_sent << ' ' << bytes_copied << ' '
        << peak_staging << ' ' << executor_seconds << ' ' << bytes_read_direct;
    return out.str();
  }
  static RankSample Decode(const std::string& text) {
    RankSample s;
    std::istringstream in(text);
    in >> s.start_ns >> s.end_ns >> s.bytes_sent >> s.bytes_copied >> s.peak_staging >>
        s.executor_seconds >> s.bytes_read_direct;
    return s;
  }
};

// All ranks' numbers for one refit, as rank 0 sees them.
struct RefitSample {
  double seconds = 0;  // first rank's start to last rank's end
  int64_t bytes_sent = 0, bytes_copied = 0, peak_staging_max = 0, peak_staging_sum = 0;
  int64_t bytes_read_direct = 0;
  double longest_rank_seconds = 0;  // the slowest rank's own Executor::Run time
};

// Prints "still running" lines every few seconds while a long refit blocks rank 0.
class Ticker {
 public:
  Ticker(bool enabled, std::string what) : what_(std::move(what)) {
    if (!enabled) return;
    thread_ = std::thread([this] {
      const auto start = Clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return done_; })) {
        Say("    ... %s running, %.0f s\n", what_.c_str(),
            std::chrono::duration<double>(Clock::now() - start).count());
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

// Single-threaded memcpy bandwidth of this process, best of a few copies of `bytes`.
double MeasureMemcpy(int64_t bytes) {
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    std::memcpy(b.get(), a.get(), bytes);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    if (b[bytes / 2] != 1) std::abort();  // keeps the copy observable
  }
  return static_cast<double>(bytes) / best;
}

Result<Config> RankConfig(const RunArgs& args) {
  Config config = DefaultConfig();
  if (!args.config_file.empty()) {
    FERRY_RETURN_IF_ERROR(config.LoadYamlFile(args.config_file).WithContext("--config"));
  }
  FERRY_RETURN_IF_ERROR(config.ApplyProcessEnvironment());
  if (!TransportRegistry::Default().Contains(args.transport)) {
    return InvalidArgument("--transport " + args.transport + ": unknown; known: " +
                           JoinNames(TransportRegistry::Default().Names()));
  }
  FERRY_RETURN_IF_ERROR(config.Set("transport.network", args.transport));
  FERRY_RETURN_IF_ERROR(config.Set("transport.intra_node", args.transport));
  FERRY_ASSIGN_OR_RETURN(double refit_seconds, config.GetSeconds("deadline.refit"));
  if (config.SourceOf("deadline.refit") == "default" && refit_seconds > args.timeout_seconds) {
    FERRY_RETURN_IF_ERROR(
        config.Set("deadline.refit", std::to_string(args.timeout_seconds) + "s"));
  }
  for (const std::string& setting : args.settings) {
    const size_t eq = setting.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("--set " + setting + ": expected name=value");
    }
    FERRY_RETURN_IF_ERROR(
        config.Set(setting.substr(0, eq), setting.substr(eq + 1)).WithContext("--set " + setting));
  }
  return config;
}

int64_t OpenFileDescriptors() {
  int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd");
       it != std::filesystem::directory_iterator(); ++it) {
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

struct RankState {
  int rank = 0, size = 0;
  Session* session = nullptr;
  Deadline store_deadline() const { return Deadline::AfterSeconds(120); }
};

// Runs `plan` (warmup + measured iterations) and verifies; rank 0 gathers and prints. Returns the
// measured samples on rank 0 (empty elsewhere).
Result<std::vector<RefitSample>> RunStrategy(const RunArgs& args, const RefitInputs& in,
                                             const TransferPlan& plan, RankState& state,
                                             HostBuffers& sources, HostBuffers& destinations,
                                             double refit_seconds) {
  Session& session = *state.session;
  const std::string name(plan.strategy);
  RankMemory memory;
  memory.source = sources.Descs(plan.source_buffers);
  memory.destination = destinations.Descs(plan.destination_buffers);
  std::vector<RefitSample> samples;
  const int total = args.warmup + args.iterations;
  int64_t fds_before = 0, rss_before = 0;
  for (int it = 0; it < total; ++it) {
    const bool measured = it >= args.warmup;
    if (it == args.warmup && args.leak_check) {
      fds_before = OpenFileDescriptors();
      rss_before = ResidentBytes();
    }
    if (args.verify) destinations.Zero(plan.destination_buffers);
    const std::string key = "run/" + name + "/" + std::to_string(it);
    FERRY_RETURN_IF_ERROR(Barrier(session.store(), key + "/start", state.size,
                                  state.store_deadline())
                              .WithContext("barrier before " + name + " refit"));
    std::string what = name + (measured ? " refit " + std::to_string(it - args.warmup + 1) + "/" +
                                              std::to_string(args.iterations)
                                        : " warm-up " + std::to_string(it + 1));
    RankSample sample;
    {
      Ticker ticker(state.rank == 0, what);
      sample.start_ns = NowNanos();
      Result<ExecutorStats> stats =
          session.executor().Run(plan, memory, Deadline::AfterSeconds(refit_seconds));
      sample.end_ns = NowNanos();
      if (!stats.ok()) {
        return stats.status().WithContext("rank " + std::to_string(state.rank) + ": " + what);
      }
      sample.bytes_sent = stats->bytes_sent;
      sample.bytes_copied = stats->bytes_copied;
      sample.bytes_read_direct = stats->bytes_read_direct;
      sample.peak_staging = stats->peak_staging_bytes;
      sample.executor_seconds = stats->seconds;
    }
    const std::string encoded = sample.Encode();
    FERRY_RETURN_IF_ERROR(session.store().Set(
        key + "/rank" + std::to_string(state.rank),
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()),
        state.store_deadline()));
    if (state.rank != 0) continue;
    RefitSample all;
    int64_t first = INT64_MAX, last = 0;
    for (int r = 0; r < state.size; ++r) {
      FERRY_ASSIGN_OR_RETURN(
          Bytes value,
          session.store().Get(key + "/rank" + std::to_string(r), state.store_deadline()));
      const RankSample s = RankSample::Decode(std::string(value.begin(), value.end()));
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
      all.bytes_sent += s.bytes_sent;
      all.bytes_copied += s.bytes_copied;
      all.bytes_read_direct += s.bytes_read_direct;
      all.longest_rank_seconds = std::max(all.longest_rank_seconds, s.executor_seconds);
      all.peak_staging_max = std::max(all.peak_staging_max, s.peak_staging);
      all.peak_staging_sum += s.peak_staging;
    }
    all.seconds = static_cast<double>(last - first) * 1e-9;
    const int64_t delivered = FragmentBytes(in.destination);
    Say("  %-16s %-22s %10s  %7.2f GB/s\n", name.c_str(), what.substr(name.size() + 1).c_str(),
        Seconds(all.seconds).c_str(), static_cast<double>(delivered) / all.seconds / 1e9);
    if (measured) samples.push_back(all);
  }
  if (args.leak_check) {
    const int64_t fds_after = OpenFileDescriptors(), rss_after = ResidentBytes();
    if (fds_after > fds_before ||
        (kCheckResidentGrowth && rss_after - rss_before > (int64_t{2} << 20))) {
      return Internal("rank " + std::to_string(state.rank) + ": " + name + " leaks across " +
                      std::to_string(args.iterations) + " refits: open fds " +
                      std::to_string(fds_before) + " -> " + std::to_string(fds_after) + ", RSS " +
                      Size(static_cast<double>(rss_before)) + " -> " +
                      Size(static_cast<double>(rss_after)));
    }
    if (state.rank == 0) {
      Say("  %-16s leak check over %d refits: open fds %lld -> %lld, RSS %s -> %s (rank 0)%s\n",
          name.c_str(), args.iterations, static_cast<long long>(fds_before),
          static_cast<long long>(fds_after), Size(static_cast<double>(rss_before)).c_str(),
          Size(static_cast<double>(rss_after)).c_str(),
          kCheckResidentGrowth ? "" : "; RSS not bounded under AddressSanitizer");
    }
  }
  if (args.verify) {
    const auto start = Clock::now();
    Result<int64_t> checked =
        VerifyPattern(in.destination, RankBuffers{state.rank, destinations.pointers()});
    const std::string key = "run/" + name + "/verify/rank" + std::to_string(state.rank);
    const std::string value = checked.ok() ? "ok " + std::to_string(*checked)
                                           : "fail " + checked.status().message();
    FERRY_RETURN_IF_ERROR(session.store().Set(
        key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()),
        state.store_deadline()));
    if (!checked.ok()) return checked.status().WithContext(name);
    if (state.rank == 0) {
      int64_t bytes = 0;
      for (int r = 0; r < state.size; ++r) {
        FERRY_ASSIGN_OR_RETURN(Bytes v, session.store().Get("run/" + name + "/verify/rank" +
                                                                std::to_string(r),
                                                            state.store_deadline()));
        const std::string text(v.begin(), v.end());
        if (text.rfind("ok ", 0) != 0) {
          return Internal(name + ": rank " + std::to_string(r) + " failed verification: " +
                          text.substr(5));
        }
        bytes += std::atoll(text.c_str() + 3);
      }
      Say("  %-16s verified %s on %d ranks: bit-exact (%.2f s)\n", name.c_str(),
          Size(static_cast<double>(bytes)).c_str(), state.size,
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return samples;
}

struct StrategySummary {
  std::string name;
  double mean = 0, best = 0;
  RefitSample last;
};

StrategySummary Summarize(const std::string& name, const std::vector<RefitSample>& samples) {
  StrategySummary s;
  s.name = name;
  s.best = 1e30;
  for (const RefitSample& r : samples) {
    s.mean += r.seconds / samples.size();
    s.best = std::min(s.best, r.seconds);
  }
  s.last = samples.back();
  return s;
}

Status RunRankOrError(const RunArgs& args) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  FERRY_ASSIGN_OR_RETURN(BootstrapInfo info, BootstrapFromProcessEnvironment());
  const bool lead = info.rank == 0;
  FERRY_ASSIGN_OR_RETURN(RefitInputs in, BuildRefitInputs(args));
  if (info.size != in.ranks) {
    return InvalidArgument("the launcher started " + std::to_string(info.size) +
                           " ranks but the refit needs " + std::to_string(in.ranks));
  }
  FERRY_ASSIGN_OR_RETURN(Config config, RankConfig(args));
  FERRY_ASSIGN_OR_RETURN(PlannerOptions planner_options, PlannerOptions::FromConfig(config));
  std::vector<TransferPlan> plans;
  for (Strategy strategy : args.strategies) {
    const auto start = Clock::now();
    Result<PlanResult> planned =
        MakePlan(strategy, in.source, in.destination, in.topology, planner_options);
    if (!planned.ok()) {
      return planned.status().WithContext(std::string(StrategyName(strategy)) + " planning");
    }
    if (lead) {
      int64_t messages = 0;
      for (const Op& op : planned->plan.ops) messages += op.kind == OpKind::kRecv ? 1 : 0;
      Say("[%5.1fs] planned %-16s %zu ops, %lld messages, %zu staging slots (%.2f s)\n",
          elapsed(), std::string(StrategyName(strategy)).c_str(), planned->plan.ops.size(),
          static_cast<long long>(messages), planned->plan.slots.size(),
          std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (planned->plan.source_buffers.size() != in.source.buffers.size() ||
        planned->plan.destination_buffers.size() != in.destination.buffers.size()) {
      return Internal("the plan's buffers do not match the layouts' buffers");
    }
    plans.push_back(std::move(planned->plan));
  }

  FERRY_ASSIGN_OR_RETURN(double refit_seconds, config.GetSeconds("deadline.refit"));
  Result<std::unique_ptr<Session>> joined = Session::Join(info, std::move(config));
  if (!joined.ok()) {
    return joined.status().WithContext("rank " + std::to_string(info.rank) + " joining");
  }
  Session& session = **joined;
  if (lead) {
    std::string transports;
    for (Transport* t : session.communicator().transports()) {
      transports += (transports.empty() ? "" : ", ") + std::string(t->name());
    }
    Say("[%5.1fs] %d ranks joined; transports in use: %s\n", elapsed(), info.size,
        transports.c_str());
  }

  HostBuffers sources(in.source.buffers, info.rank, "sources");
  HostBuffers destinations(in.destination.buffers, info.rank, "destinations");
  if (!sources.complete(in.source.buffers, info.rank) ||
      !destinations.complete(in.destination.buffers, info.rank)) {
    return Unavailable("rank " + std::to_string(info.rank) + ": out of host memory for " +
                       Size(static_cast<double>(sources.total() + destinations.total())) +
                       " of buffers");
  }
  FERRY_RETURN_IF_ERROR(FillPattern(in.source, RankBuffers{info.rank, sources.pointers()}));
  RankState state{info.rank, info.size, &session};
  FERRY_RETURN_IF_ERROR(Barrier(session.store(), "run/filled", info.size, state.store_deadline()));
  double memcpy_bps = 0;
  const int64_t delivered = FragmentBytes(in.destination);
  if (lead) {
    Say("[%5.1fs] buffers allocated and filled: %s of sources, %s of destinations\n", elapsed(),
        Size(static_cast<double>(FragmentBytes(in.source))).c_str(),
        Size(static_cast<double>(delivered)).c_str());
    memcpy_bps = MeasureMemcpy(int64_t{256} << 20);
    Say("[%5.1fs] plain memcpy on this machine (one thread, 256 MiB): %.2f GB/s\n", elapsed(),
        memcpy_bps / 1e9);
  }
  FERRY_RETURN_IF_ERROR(Barrier(session.store(), "run/memcpy", info.size, state.store_deadline()));

  std::vector<StrategySummary> summaries;
  for (const TransferPlan& plan : plans) {
    FERRY_ASSIGN_OR_RETURN(std::vector<RefitSample> samples,
                           RunStrategy(args, in, plan, state, sources, destinations,
                                       refit_seconds));
    if (lead) summaries.push_back(Summarize(plan.strategy, samples));
  }
  if (lead) {
    Say("\n%s\n", in.description.c_str());
    Say("  %-24s", "");
    for (const StrategySummary& s : summaries) Say(" %18s", s.name.c_str());
    Say("\n");
    auto row = [&](const char* label, auto cell) {
      Say("  %-24s", label);
      for (const StrategySummary& s : summaries) Say(" %18s", cell(s).c_str());
      Say("\n");
    };
    auto gbps = [&](double seconds) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f GB/s", static_cast<double>(delivered) / seconds / 1e9);
      return std::string(buf);
    };
    row("refit time (mean)", [&](const StrategySummary& s) { return Seconds(s.mean); });
    row("refit time (best)", [&](const StrategySummary& s) { return Seconds(s.best); });
    row("slowest rank's own run", [&](const StrategySummary& s) {
      return Seconds(s.last.longest_rank_seconds);
    });
    row("bandwidth (mean)", [&](const StrategySummary& s) { return gbps(s.mean); });
    row("vs memcpy", [&](const StrategySummary& s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f%%",
                    100.0 * static_cast<double>(delivered) / s.mean / memcpy_bps);
      return std::string(buf);
    });
    row("delivered", [&](const StrategySummary&) { return Size(static_cast<double>(delivered)); });
    row("sent by transports", [&](const StrategySummary& s) {
      return Size(static_cast<double>(s.last.bytes_sent));
    });
    row("read from peers directly", [&](const StrategySummary& s) {
      return Size(static_cast<double>(s.last.bytes_read_direct));
    });
    row("copied in ranks", [&](const StrategySummary& s) {
      return Size(static_cast<double>(s.last.bytes_copied));
    });
    row("peak staging/rank", [&](const StrategySummary& s) {
      return Size(static_cast<double>(s.last.peak_staging_max));
    });
    row("peak staging sum", [&](const StrategySummary& s) {
      return Size(static_cast<double>(s.last.peak_staging_sum));
    });
    Say("  bandwidth = bytes delivered to destination fragments / time from the first rank's start "
        "to the last rank's end\n");
    if (summaries.size() == 2) {
      Say("  %s is %.2fx faster than %s (mean of %d refits each, same transport, same run)\n",
          summaries[0].name.c_str(), summaries[1].mean / summaries[0].mean,
          summaries[1].name.c_str(), args.iterations);
    }
    if (!args.results_file.empty()) {
      std::ofstream out(args.results_file, std::ios::app);
      for (const StrategySummary& s : summaries) {
        std::string label = args.transport;
        for (std::string setting : args.settings) {
          std::replace(setting.begin(), setting.end(), ',', '+');
          label += " " + setting;
        }
        out << label << ',' << s.name << ',' << info.size << ',' << delivered << ','
            << s.mean << ',' << s.best << ',' << delivered / s.mean / 1e9 << ','
            << memcpy_bps / 1e9 << ',' << s.last.bytes_sent << ',' << s.last.peak_staging_max
            << '\n';
      }
      if (!out) return IoError("cannot write --results " + args.results_file);
    }
  }
  FERRY_RETURN_IF_ERROR(session.Finish());
  if (lead) Say("[%5.1fs] done\n", elapsed());
  return Status::Ok();
}

void AddCommonOptions(CLI::App& cmd, RunArgs& args, std::string& strategy) {
  cmd.add_option("--transport", args.transport,
                 "transport between ranks (tcp, ucx, libfabric; `ferry config` lists options)");
  cmd.add_option("--strategy", strategy, "reshard, gather-broadcast or both");
  cmd.add_option("--iterations", args.iterations, "measured refits per strategy")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--warmup", args.warmup, "unmeasured refits per strategy before them")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--timeout", args.timeout_seconds,
                 "seconds the whole run may take; ranks still running after it are killed");
  cmd.add_option("--config", args.config_file, "YAML file of options (see `ferry config`)");
  cmd.add_option("--set", args.settings, "an option as name=value (repeatable)");
  cmd.add_option("--results", args.results_file, "append one CSV row per strategy to this file");
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
  return argv;
}

int RunRank(const RunArgs& args) {
  Status status = RunRankOrError(args);
  if (status.ok()) return 0;
  const char* rank = std::getenv("RANK");
  std::fprintf(stderr, "ferry run: rank %s: %s\n", rank != nullptr ? rank : "?",
               status.ToString().c_str());
  return 1;
}

int RunCommand(const RunArgs& args) {
  if (LaunchedAsRank()) return RunRank(args);
  Result<RefitInputs> in = BuildRefitInputs(args);
  if (!in.ok()) {
    std::fprintf(stderr, "ferry run: %s\n", in.status().ToString().c_str());
    return 1;
  }
  if (!TransportRegistry::Default().Contains(args.transport)) {
    std::fprintf(stderr, "ferry run: --transport %s: unknown; known: %s\n", args.transport.c_str(),
                 JoinNames(TransportRegistry::Default().Names()).c_str());
    return 1;
  }
  if (!args.label.empty()) Say("%s\n", args.label.c_str());
  Say("ferry run: %s\n  %d local processes, transport %s, %s%s\n", in->description.c_str(),
      in->ranks, args.transport.c_str(),
      args.strategies.size() == 2 ? "reshard then gather-broadcast" :
                                    std::string(StrategyName(args.strategies[0])).c_str(),
      args.verify ? ", verified" : "");
  LaunchOptions launch;
  launch.argv = RunArgv(args);
  launch.ranks = in->ranks;
  launch.timeout_seconds = args.timeout_seconds;
  // Defaults that suit processes of one machine, unless the caller chose otherwise.
  const std::pair<const char*, const char*> local_defaults[] = {
      {"FERRY_TCP_ADDRESS", "127.0.0.1"},
      {"FERRY_UCX_TLS", "sm,tcp"},
      {"FERRY_LIBFABRIC_DOMAIN", "lo"},
  };
  for (const auto& [name, value] : local_defaults) {
    if (std::getenv(name) == nullptr) launch.environment.emplace_back(name, value);
  }
  Result<LaunchResult> result = LaunchLocalRanks(launch);
  if (!result.ok()) {
    std::fprintf(stderr, "ferry run: %s\n", result.status().ToString().c_str());
    return 1;
  }
  if (!result->ok()) {
    std::fprintf(stderr, "ferry run: failed: %s\n",
                 result->Describe(args.timeout_seconds).c_str());
    return 1;
  }
  return 0;
}

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto strategy = std::make_shared<std::string>("reshard");
  CLI::App* run = app.add_subcommand(
      "run", "a real refit on host memory: one process per rank here (or one rank under "
             "torchrun/mpirun/srun), verified against a deterministic pattern");
  run->add_option("--model", args->model, "model preset (ferry layout --list-models)");
  run->add_option("--scale", args->scale, "shrink the preset's wide dims, e.g. 1/64");
  run->add_option("--src", args->source_spec, "source framework spec, e.g. megatron:tp=2,ep=2");
  run->add_option("--dst", args->destination_spec, "destination spec, e.g. vllm:tp=2,dp=2");
  run->add_option("--src-layout", args->source_layout_file, "source layout file (YAML/JSON)");
  run->add_option("--dst-layout", args->destination_layout_file, "destination layout file");
  run->add_flag("--colocated", args->colocated, "destination on the source's ranks");
  run->add_option("--gpus-per-node", args->gpus_per_node, "ranks per node in the topology");
  run->add_flag("--verify", args->verify, "check every destination byte after each strategy");
  run->add_flag("--leak-check", args->leak_check,
                "fail when open fds or RSS (> 2 MiB) grow over the measured refits");
  AddCommonOptions(*run, *args, *strategy);
  run->callback([args, strategy, exit_code] {
    if (Status s = ApplyStrategy(*strategy, *args); !s.ok()) {
      std::fprintf(stderr, "ferry run: --strategy: %s\n", s.ToString().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = RunCommand(*args);
  });

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
      std::fprintf(stderr, "ferry demo: --strategy: %s\n", s.ToString().c_str());
      *exit_code = 1;
      return;
    }
    // UCX shared memory between the local processes. UCX 1.13's shared-memory transports cannot
    // detect a dead peer, so they need error mode 'none'; the local launcher's deadline still ends
    // every rank if one dies. --set ucx.tls=... / ucx.error_mode=... choose otherwise.
    if (demo_args->transport == "ucx") {
      const bool tls_chosen = std::getenv("FERRY_UCX_TLS") != nullptr ||
                              std::any_of(demo_args->settings.begin(), demo_args->settings.end(),
                                          [](const std::string& s) { return s.rfind("ucx.tls=", 0) == 0; });
      if (!tls_chosen) {
        demo_args->settings.push_back("ucx.tls=sm");
        demo_args->settings.push_back("ucx.error_mode=none");
      }
    }
    demo_args->label = "ferry demo: a verified refit on this machine, reshard vs gather-and-broadcast";
    *exit_code = RunCommand(*demo_args);
  });
}

}  // namespace ferry::cli
