// `ferry bench transports`: message-size sweep per transport, one refit plan per transport, CSV,
// table and a hand-written SVG chart.
#include "tools/cli/cmd_bench.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "core/refit/config.h"
#include "core/runtime/bootstrap.h"
#include "core/runtime/communicator.h"
#include "core/runtime/executor.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/session.h"
#include "core/runtime/store.h"
#include "core/runtime/transport.h"
#include "tools/cli/cmd_run.h"
#include "tools/cli/commands.h"
#include "tools/cli/local_launch.h"

namespace ferry::cli {
namespace {

// One transport configuration the bench compares.
struct BenchTransport {
  std::string label;
  std::string transport;
  std::vector<std::string> settings;  // name=value
  bool in_process = false;            // `local`: ranks are threads of one process
};

std::vector<BenchTransport> BenchTransports() {
  return {
      {"tcp", "tcp", {"tcp.address=127.0.0.1"}, false},
      // UCX 1.13 drops shared memory in error mode peer (ferry's default): this series runs over
      // tcp on loopback, as `ferry run` prints ("ucx links of rank 0: tcp/lo ...").
      {"ucx sm+tcp", "ucx", {"ucx.tls=sm,tcp"}, false},
      {"ucx tcp", "ucx", {"ucx.tls=tcp"}, false},
      {"libfabric tcp", "libfabric", {"libfabric.provider=tcp", "libfabric.domain=lo"}, false},
      {"libfabric shm", "libfabric", {"libfabric.provider=shm"}, false},
      {"local (threads)", "local", {}, true},
      // Not a transport: the executor's direct read between ranks of one node (the receiver copies
      // once from the sender's memfd-backed buffer; tcp carries only the offer and the reply), as
      // the reference the transports are measured against.
      {"direct read", "tcp", {"tcp.address=127.0.0.1", "executor.direct_intra_node=true"}, false},
  };
}

std::string FormatSize(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) {
    return std::to_string(bytes >> 30) + " GiB";
  }
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Per pair p of `pairs` (ranks 2p -> 2p + 1), n messages of `size` bytes, cycling through
// `buffer_bytes` of the pair's source and destination buffers (buffer p of each).
TransferPlan StreamPlan(int64_t size, int64_t messages, int64_t buffer_bytes, int pairs) {
  TransferPlan plan;
  plan.strategy = "bench";
  plan.num_ranks = 2 * pairs;
  for (int p = 0; p < pairs; ++p) {
    plan.source_buffers.push_back({2 * p, "stream", buffer_bytes});
    plan.destination_buffers.push_back({2 * p + 1, "stream", buffer_bytes});
  }
  const int64_t slots = std::max<int64_t>(1, buffer_bytes / size);
  for (int64_t i = 0; i < messages; ++i) {
    const int64_t offset = (i % slots) * size;
    for (int p = 0; p < pairs; ++p) {
      Op send;
      send.kind = OpKind::kSend;
      send.rank = 2 * p;
      send.peer = 2 * p + 1;
      send.message = i * pairs + p;
      send.link = LinkClass::kSameNode;
      send.SetData(ByteRange(Space::kSource, p, offset, size));
      plan.AddOp(send);
      Op recv = send;
      recv.kind = OpKind::kRecv;
      recv.rank = 2 * p + 1;
      recv.peer = 2 * p;
      recv.SetData(ByteRange(Space::kDestination, p, offset, size));
      plan.AddOp(recv);
    }
  }
  return plan;
}

// The earliest start and latest end over every rank of step `key`: each rank publishes its own,
// rank 0 reads them all (the others return their own span).
Result<double> SpanOverRanks(Store& store, const std::string& key, int rank, int ranks,
                             int64_t start, int64_t end) {
  const std::string mine = std::to_string(start) + " " + std::to_string(end);
  FERRY_RETURN_IF_ERROR(store.Set(key + "/" + std::to_string(rank),
                                  std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(mine.data()), mine.size()),
                                  Deadline::AfterSeconds(60)));
  for (int other = 0; rank == 0 && other < ranks; ++other) {
    FERRY_ASSIGN_OR_RETURN(Bytes text, store.Get(key + "/" + std::to_string(other),
                                                 Deadline::AfterSeconds(60)));
    int64_t other_start = 0, other_end = 0;
    std::istringstream(std::string(text.begin(), text.end())) >> other_start >> other_end;
    start = std::min(start, other_start);
    end = std::max(end, other_end);
  }
  return static_cast<double>(end - start) * 1e-9;
}

// Every rank calls it; rank 0 returns the series (the others a series of their own spans).
Result<SweepSeries> SweepOnRank(const std::string& label, Communicator& comm, Store& store,
                                const std::vector<int64_t>& sizes, int repetitions,
                                int64_t stream_bytes, int pairs) {
  const int rank = comm.rank();
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(comm));
  const int64_t buffer_bytes = std::max(stream_bytes, sizes.back());
  // Shareable memory (a memfd), so the direct-read series maps it; transports register it as any
  // other host memory.
  FERRY_ASSIGN_OR_RETURN(SharedHostMemory buffer, SharedHostMemory::Allocate(buffer_bytes, "ferry-bench"));
  std::memset(buffer.data(), rank + 1, static_cast<size_t>(buffer_bytes));
  RankMemory memory;
  memory.source.resize(pairs);
  memory.destination.resize(pairs);
  (rank % 2 == 0 ? memory.source : memory.destination)[rank / 2] = buffer.desc();
  SweepSeries series;
  series.label = label;
  series.pairs = pairs;
  int step = 0;
  auto timed = [&](const TransferPlan& plan) -> Result<double> {
    const std::string key = "bench/" + std::to_string(comm.epoch()) + "/" + std::to_string(step++);
    FERRY_RETURN_IF_ERROR(Barrier(store, key, 2 * pairs, Deadline::AfterSeconds(60)));
    const int64_t start = NowNanos();
    Result<ExecutorStats> stats = executor->Run(plan, memory, Deadline::AfterSeconds(120));
    const int64_t end = NowNanos();
    if (!stats.ok()) return stats.status().WithContext(label + ": rank " + std::to_string(rank));
    return SpanOverRanks(store, key, rank, 2 * pairs, start, end);
  };
  for (int64_t size : sizes) {
    SweepPoint point;
    point.size_bytes = size;
    const int64_t per_pair = std::max<int64_t>(2, stream_bytes / size);
    point.messages = per_pair * pairs;
    const TransferPlan stream = StreamPlan(size, per_pair, buffer_bytes, pairs);
    const TransferPlan single = StreamPlan(size, 1, buffer_bytes, pairs);
    FERRY_RETURN_IF_ERROR(timed(single).status());  // warm-up: registration, connection
    point.stream_seconds = 1e30;
    point.single_message_seconds = 1e30;
    for (int r = 0; r < repetitions; ++r) {
      FERRY_ASSIGN_OR_RETURN(double s, timed(stream));
      point.stream_seconds = std::min(point.stream_seconds, s);
      FERRY_ASSIGN_OR_RETURN(double one, timed(single));
      point.single_message_seconds = std::min(point.single_message_seconds, one);
    }
    series.points.push_back(point);
  }
  return series;
}

Result<Config> BenchConfig(const BenchTransport& t) {
  Config config = DefaultConfig();
  FERRY_RETURN_IF_ERROR(config.ApplyProcessEnvironment());
  FERRY_RETURN_IF_ERROR(config.Set("transport.network", t.transport));
  FERRY_RETURN_IF_ERROR(config.Set("transport.intra_node", t.transport));
  // The sweep measures the transports themselves: no direct reads between the two ranks, but for
  // the "direct read" series, which turns them on in its settings.
  FERRY_RETURN_IF_ERROR(config.Set("executor.direct_intra_node", "false"));
  for (const std::string& s : t.settings) {
    const size_t eq = s.find('=');
    FERRY_RETURN_IF_ERROR(config.Set(s.substr(0, eq), s.substr(eq + 1)));
  }
  return config;
}

// The `local` sweep: 2 x pairs threads of this process, an in-memory store.
Result<SweepSeries> SweepInProcess(const BenchTransport& t, const std::vector<int64_t>& sizes,
                                   int repetitions, int64_t stream_bytes, int pairs) {
  FERRY_ASSIGN_OR_RETURN(Config config, BenchConfig(t));
  InMemoryStore store;
  const int ranks = 2 * pairs;
  std::vector<Result<SweepSeries>> results(ranks, SweepSeries{});
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.rank = rank;
      options.size = ranks;
      options.store = &store;
      options.config = &config;
      options.node_of_rank.assign(ranks, 0);
      Result<std::unique_ptr<Communicator>> comm =
          Communicator::Create(options, Deadline::AfterSeconds(30));
      if (!comm.ok()) {
        results[rank] = comm.status();
        store.Close();
        return;
      }
      results[rank] = SweepOnRank(t.label, **comm, store, sizes, repetitions, stream_bytes, pairs);
      if (!results[rank].ok()) store.Close();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Result<SweepSeries>& r : results) {
    if (!r.ok()) return r.status();
  }
  return std::move(results[0]).value();
}

std::string SeriesRows(const SweepSeries& s) {
  std::ostringstream out;
  for (const SweepPoint& p : s.points) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s,%lld,%lld,%.9f,%.4f,%.2f,%d\n", s.label.c_str(),
                  static_cast<long long>(p.size_bytes), static_cast<long long>(p.messages),
                  p.stream_seconds, p.StreamGBps(), p.single_message_seconds * 1e6, s.pairs);
    out << buf;
  }
  return out.str();
}

Result<SweepSeries> ParseSeriesRows(const std::string& text) {
  SweepSeries s;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, ',')) cells.push_back(cell);
    if (cells.size() != 7) return Internal("bench: malformed sweep row: " + line);
    s.label = cells[0];
    s.pairs = std::stoi(cells[6]);
    SweepPoint p;
    p.size_bytes = std::stoll(cells[1]);
    p.messages = std::stoll(cells[2]);
    p.stream_seconds = std::stod(cells[3]);
    p.single_message_seconds = std::stod(cells[5]) * 1e-6;
    s.points.push_back(p);
  }
  return s;
}

struct BenchArgs {
  std::string out_dir = "ferry-bench";
  std::string min_size = "4KiB", max_size = "64MiB";
  std::string stream_bytes = "64MiB";
  int repetitions = 3;
  int pairs = 1;  // concurrent sender -> receiver pairs, 2 * pairs processes
  std::vector<std::string> only;  // labels or transport names to keep
  bool skip_plan = false;
  std::string plan_scale = "1/32";
  double timeout_seconds = 300;
  int one = -1;  // hidden: this process is a rank of the sweep of configuration `one`
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return IoError("cannot write " + path);
  return Status::Ok();
}

// A sweep rank under the local launcher (hidden --one): rank 0 writes DIR/.sweep-<one>.csv.
Status SweepRank(const BenchArgs& args, const std::vector<int64_t>& sizes, int64_t stream_bytes) {
  const std::vector<BenchTransport> all = BenchTransports();
  if (args.one < 0 || args.one >= static_cast<int>(all.size())) {
    return InvalidArgument("bench: no transport configuration " + std::to_string(args.one));
  }
  const BenchTransport& t = all[args.one];
  FERRY_ASSIGN_OR_RETURN(BootstrapInfo info, BootstrapFromProcessEnvironment());
  FERRY_ASSIGN_OR_RETURN(Config config, BenchConfig(t));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Join(info, config));
  FERRY_ASSIGN_OR_RETURN(SweepSeries series,
                         SweepOnRank(t.label, session->communicator(), session->store(), sizes,
                                     args.repetitions, stream_bytes, args.pairs));
  if (info.rank == 0) {
    FERRY_RETURN_IF_ERROR(
        WriteFile(args.out_dir + "/.sweep-" + std::to_string(args.one) + ".csv", SeriesRows(series)));
  }
  return session->Finish();
}

bool Wanted(const BenchArgs& args, const BenchTransport& t) {
  if (args.only.empty()) return true;
  for (const std::string& o : args.only) {
    if (o == t.label || o == t.transport) return true;
  }
  return false;
}

// One transport's sweep: in this process, or over 2 * pairs launched ranks (transport `index`
// of BenchTransports) whose rank 0 writes the series to a part file in the output folder.
Result<SweepSeries> SweepTransport(const BenchArgs& args, const BenchTransport& t, size_t index,
                                   const std::vector<int64_t>& sizes, int64_t stream_bytes) {
  if (t.in_process) return SweepInProcess(t, sizes, args.repetitions, stream_bytes, args.pairs);
  const std::string part = args.out_dir + "/.sweep-" + std::to_string(index) + ".csv";
  std::remove(part.c_str());
  LaunchOptions launch;
  launch.argv = {"ferry", "bench", "transports", "--out", args.out_dir, "--min-size",
                 args.min_size, "--max-size", args.max_size, "--stream-bytes",
                 args.stream_bytes, "--repetitions", std::to_string(args.repetitions),
                 "--pairs", std::to_string(args.pairs), "--one", std::to_string(index)};
  launch.ranks = 2 * args.pairs;
  launch.timeout_seconds = args.timeout_seconds;
  Result<LaunchResult> launched = LaunchLocalRanks(launch);
  if (!launched.ok()) return launched.status();
  if (!launched->ok()) return Unavailable(launched->Describe(args.timeout_seconds));
  Result<SweepSeries> series = ParseSeriesRows(ReadFile(part));
  std::remove(part.c_str());
  return series;
}

// The sweep of every wanted transport, with progress; the failed ones into `failures`.
std::vector<SweepSeries> SweepWanted(const BenchArgs& args, const std::vector<int64_t>& sizes,
                                     int64_t stream_bytes, std::vector<std::string>& failures) {
  const std::vector<BenchTransport> all = BenchTransports();
  std::vector<SweepSeries> series;
  for (size_t i = 0; i < all.size(); ++i) {
    const BenchTransport& t = all[i];
    if (!Wanted(args, t)) continue;
    std::printf("sweep: %s, %s .. %s, %d repetitions ...\n", t.label.c_str(),
                FormatSize(sizes.front()).c_str(), FormatSize(sizes.back()).c_str(),
                args.repetitions);
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    Result<SweepSeries> result = SweepTransport(args, t, i, sizes, stream_bytes);
    if (!result.ok()) {
      failures.push_back(t.label + ": " + result.status().ToString());
      std::fprintf(stderr, "  %s failed: %s\n", t.label.c_str(), result.status().ToString().c_str());
      continue;
    }
    std::printf("  done in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    series.push_back(std::move(*result));
  }
  return series;
}

// Prints the sweep's table and writes sweep.csv and sweep.svg.
Status WriteSweep(const BenchArgs& args, const std::vector<SweepSeries>& series) {
  std::printf("\nstream bandwidth (GB/s, all pairs together) and one message a pair alone (us), "
              "%d pair(s) of ranks at once, through the executor:\n%s",
              args.pairs, SweepTable(series).c_str());
  FERRY_RETURN_IF_ERROR(WriteFile(args.out_dir + "/sweep.csv", SweepCsv(series)));
  return WriteFile(args.out_dir + "/sweep.svg",
                   SweepSvg(series, "ferry bench transports: " + std::to_string(2 * args.pairs) +
                                        " processes, stream of messages"));
}

// A verified Qwen3-30B-A3B refit over each wanted launched transport into plan.csv; the failed
// ones into `failures`.
Status RefitPerTransport(const BenchArgs& args, std::vector<std::string>& failures) {
  const std::string plan_csv = args.out_dir + "/plan.csv";
  FERRY_RETURN_IF_ERROR(WriteFile(plan_csv,
                                  "transport,strategy,ranks,delivered_bytes,mean_seconds,"
                                  "best_seconds,GBps,memcpy_GBps,bytes_sent,peak_staging_bytes,"
                                  "start_spread_seconds,bytes_received_by_transport\n"));
  for (const BenchTransport& t : BenchTransports()) {
    if (t.in_process || !Wanted(args, t)) continue;
    RunArgs run;
    run.model = "qwen3-30b-a3b";
    run.scale = args.plan_scale;
    run.source_spec = "megatron:tp=2,ep=2";
    run.destination_spec = "vllm:tp=2,dp=2";
    run.transport = t.transport;
    run.settings = t.settings;
    run.iterations = 3;
    run.warmup = 1;
    run.verify = true;
    run.timeout_seconds = args.timeout_seconds;
    run.results_file = plan_csv;
    std::printf("\nplan: %s\n", t.label.c_str());
    std::fflush(stdout);
    if (RunCommand(run) != 0) failures.push_back("plan over " + t.label + " failed");
  }
  std::printf("\nrefit plan per transport (%s):\n%s", plan_csv.c_str(), ReadFile(plan_csv).c_str());
  return Status::Ok();
}

int BenchTransportsCommand(const BenchArgs& args) {
  Result<int64_t> min_size = ParseBytes(args.min_size);
  Result<int64_t> max_size = ParseBytes(args.max_size);
  Result<int64_t> stream_bytes = ParseBytes(args.stream_bytes);
  if (!min_size.ok() || !max_size.ok() || !stream_bytes.ok() || *min_size < 1 ||
      *max_size < *min_size || *stream_bytes < 1 || args.repetitions < 1 || args.pairs < 1 ||
      args.pairs > kMaxBenchPairs) {
    std::fprintf(stderr,
                 "ferry bench: bad --min-size/--max-size/--stream-bytes/--repetitions/--pairs\n");
    return 1;
  }
  const std::vector<int64_t> sizes = SweepSizes(*min_size, *max_size);
  if (args.one >= 0) {
    Status s = SweepRank(args, sizes, *stream_bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "ferry bench: rank %s: %s\n", std::getenv("RANK"), s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  ::mkdir(args.out_dir.c_str(), 0755);
  struct stat st {};
  if (::stat(args.out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "ferry bench: cannot create --out %s\n", args.out_dir.c_str());
    return 1;
  }
  std::vector<std::string> failures;
  const std::vector<SweepSeries> series = SweepWanted(args, sizes, *stream_bytes, failures);
  Status written = series.empty() ? Status::Ok() : WriteSweep(args, series);
  if (written.ok() && !args.skip_plan) written = RefitPerTransport(args, failures);
  if (!written.ok()) {
    std::fprintf(stderr, "ferry bench: %s\n", written.message().c_str());
    return 1;
  }
  std::printf("\nwrote %s/sweep.csv, %s/sweep.svg%s\n", args.out_dir.c_str(),
              args.out_dir.c_str(), args.skip_plan ? "" : (", " + args.out_dir + "/plan.csv").c_str());
  for (const std::string& f : failures) std::fprintf(stderr, "failed: %s\n", f.c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace

std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = min_bytes; s <= max_bytes; s *= 4) {
    sizes.push_back(s);
    if (s > max_bytes / 4) break;
  }
  if (sizes.back() != max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

std::string SweepCsv(const std::vector<SweepSeries>& series) {
  std::string out =
      "transport,size_bytes,messages,stream_seconds,stream_GBps,single_message_us,pairs\n";
  for (const SweepSeries& s : series) out += SeriesRows(s);
  return out;
}

std::string SweepTable(const std::vector<SweepSeries>& series) {
  std::map<int64_t, std::vector<const SweepPoint*>> by_size;
  for (size_t i = 0; i < series.size(); ++i) {
    for (const SweepPoint& p : series[i].points) {
      auto& row = by_size[p.size_bytes];
      row.resize(series.size(), nullptr);
      row[i] = &p;
    }
  }
  std::ostringstream out;
  char buf[128];
  std::snprintf(buf, sizeof buf, "  %-9s", "size");
  out << buf;
  for (const SweepSeries& s : series) {
    std::snprintf(buf, sizeof buf, " %20s", s.label.c_str());
    out << buf;
  }
  out << "\n";
  for (const auto& [size, row] : by_size) {
    std::snprintf(buf, sizeof buf, "  %-9s", FormatSize(size).c_str());
    out << buf;
    for (const SweepPoint* p : row) {
      if (p == nullptr) {
        std::snprintf(buf, sizeof buf, " %20s", "-");
      } else {
        std::snprintf(buf, sizeof buf, " %8.2f GB/s %5.0fus", p->StreamGBps(),
                      p->single_message_seconds * 1e6);
      }
      out << buf;
    }
    out << "\n";
  }
  return out.str();
}

namespace {

// The sweep chart's plot area and scales: message size on a log2 x axis, GB/s on a linear y axis
// rounded up to a "nice" tick step.
struct SweepAxes {
  static constexpr double kWidth = 760, kHeight = 460;
  static constexpr double kLeft = 70, kRight = 190, kTop = 40, kBottom = 60;
  static constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
  double lx0 = 0, lx1 = 1;  // log2 of the smallest and largest size
  double y_max = 1, step = 1;

  double X(double size) const { return kLeft + (std::log2(size) - lx0) / (lx1 - lx0) * kPlotW; }
  double Y(double gbps) const { return kTop + kPlotH - gbps / y_max * kPlotH; }
};

// The axes that hold every point of `series`; y ticks 1, 2 or 5 times a power of ten apart, five
// or so.
SweepAxes SweepAxesFor(const std::vector<SweepSeries>& series) {
  int64_t min_size = INT64_MAX, max_size = 1;
  double max_gbps = 0;
  for (const SweepSeries& s : series) {
    for (const SweepPoint& p : s.points) {
      min_size = std::min(min_size, p.size_bytes);
      max_size = std::max(max_size, p.size_bytes);
      max_gbps = std::max(max_gbps, p.StreamGBps());
    }
  }
  if (min_size == INT64_MAX) min_size = 1;
  SweepAxes a;
  a.lx0 = std::log2(static_cast<double>(min_size));
  a.lx1 = std::log2(static_cast<double>(max_size));
  if (a.lx1 <= a.lx0) a.lx1 = a.lx0 + 1;
  a.y_max = max_gbps > 0 ? max_gbps * 1.1 : 1;
  const double raw_step = a.y_max / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw_step)));
  a.step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw_step) {
      a.step = m * magnitude;
      break;
    }
  }
  a.y_max = std::ceil(a.y_max / a.step) * a.step;
  return a;
}

// The chart's header, title, grid, ticks (y at each step, x at each power of 4), frame and axis
// labels.
std::string SweepFrame(const SweepAxes& a, const std::string& title) {
  const double left = SweepAxes::kLeft, top = SweepAxes::kTop;
  const double plot_w = SweepAxes::kPlotW, plot_h = SweepAxes::kPlotH;
  std::ostringstream svg;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                SweepAxes::kWidth, SweepAxes::kHeight, SweepAxes::kWidth, SweepAxes::kHeight);
  svg << buf;
  svg << "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n",
                left + plot_w / 2, title.c_str());
  svg << buf;
  for (double y = 0; y <= a.y_max + a.step / 2; y += a.step) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  left, a.Y(y), left + plot_w, a.Y(y), left - 6, a.Y(y) + 4, y);
    svg << buf;
  }
  for (double lx = std::ceil(a.lx0 / 2) * 2; lx <= a.lx1 + 1e-9; lx += 2) {
    const double size = std::pow(2, lx);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                  a.X(size), top, a.X(size), top + plot_h, a.X(size), top + plot_h + 18,
                  FormatSize(static_cast<int64_t>(size)).c_str());
    svg << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"black\"/>\n",
                left, top, plot_w, plot_h);
  svg << buf;
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">message size (log scale)</text>\n"
                "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
                "GB/s (bytes delivered / time)</text>\n",
                left + plot_w / 2, SweepAxes::kHeight - 18, top + plot_h / 2, top + plot_h / 2);
  svg << buf;
  return svg.str();
}

// Series `i`: its line, a dot at each point and its legend entry right of the plot.
std::string SweepSeriesSvg(const SweepAxes& a, const SweepSeries& series, size_t i) {
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                        "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  const char* color = kColors[i % 8];
  std::ostringstream svg;
  char buf[512];
  std::string points;
  for (const SweepPoint& p : series.points) {
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", a.X(static_cast<double>(p.size_bytes)), a.Y(p.StreamGBps()));
    points += buf;
  }
  svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"" << points
      << "\"/>\n";
  for (const SweepPoint& p : series.points) {
    std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                  a.X(static_cast<double>(p.size_bytes)), a.Y(p.StreamGBps()), color);
    svg << buf;
  }
  const double legend_x = SweepAxes::kLeft + SweepAxes::kPlotW;
  const double ly = SweepAxes::kTop + 10 + 20 * static_cast<double>(i);
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                legend_x + 15, ly, legend_x + 40, ly, color, legend_x + 46, ly + 4, series.label.c_str());
  svg << buf;
  return svg.str();
}

}  // namespace

std::string SweepSvg(const std::vector<SweepSeries>& series, const std::string& title) {
  const SweepAxes axes = SweepAxesFor(series);
  std::string svg = SweepFrame(axes, title);
  for (size_t i = 0; i < series.size(); ++i) svg += SweepSeriesSvg(axes, series[i], i);
  return svg + "</svg>\n";
}

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "benchmarks on this machine");
  bench->require_subcommand(1);
  CLI::App* transports = bench->add_subcommand(
      "transports", "message-size sweep and one refit plan over each transport; writes a table, "
                    "CSV files and an SVG chart");
  transports->add_option("--out", args->out_dir, "output folder (created)");
  transports->add_option("--min-size", args->min_size, "smallest message, e.g. 4KiB");
  transports->add_option("--max-size", args->max_size, "largest message, e.g. 64MiB");
  transports->add_option("--stream-bytes", args->stream_bytes,
                         "bytes streamed per measurement (at least two messages)");
  transports->add_option("--repetitions", args->repetitions, "measurements per point (best kept)");
  transports->add_option("--pairs", args->pairs,
                         "sender -> receiver pairs streaming at once (2 x pairs processes; the "
                         "bandwidth is theirs together), 1 to " + std::to_string(kMaxBenchPairs));
  transports->add_option("--only", args->only,
                         "transports to keep, by name or label (tcp, ucx, libfabric, local, ...)");
  transports->add_flag("--skip-plan", args->skip_plan, "only the message-size sweep");
  transports->add_option("--plan-scale", args->plan_scale, "model scale of the refit plan");
  transports->add_option("--timeout", args->timeout_seconds, "seconds per launch before kills");
  transports->add_option("--one", args->one)->group("");  // a rank of one sweep (internal)
  transports->callback([args, exit_code] { *exit_code = BenchTransportsCommand(*args); });
}

}  // namespace ferry::cli
