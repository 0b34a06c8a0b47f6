// `ferry run`'s samples, their aggregation on rank 0, the memcpy reference and the report table.
#include "tools/cli/run_report.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>

#include "core/base/strings.h"

namespace ferry::cli {

namespace {

// Bounds on a sample's per-transport entries: the store is shared by every rank, so a sample is
// untrusted text.
constexpr size_t kMaxPaths = 64, kMaxPathName = 64;

bool IsPathName(const std::string& name) {
  if (name.empty() || name.size() > kMaxPathName) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.') return false;
  }
  return true;
}

}  // namespace

std::string RankSample::Encode() const {
  std::ostringstream out;
  out << start_ns << ' ' << end_ns << ' ' << bytes_sent << ' ' << bytes_copied << ' ' << peak_staging << ' '
      << executor_seconds << ' ' << bytes_read_direct << ' ' << instant_ns << ' ' << known_ns << ' '
      << bytes_delivered << ' ' << bytes_quantized_direct << ' ' << bytes_read_packed << ' ' << by_transport.size();
  for (const auto& [name, t] : by_transport) {
    out << ' ' << name << ' ' << t.bytes_sent << ' ' << t.messages_sent << ' ' << t.bytes_received << ' '
        << t.messages_received;
  }
  return out.str();
}

Result<RankSample> RankSample::Decode(const std::string& text) {
  RankSample s;
  std::istringstream in(text);
  size_t paths = 0;
  const std::string what = "not a refit sample: '" + text.substr(0, 64) + "'";
  if (!(in >> s.start_ns >> s.end_ns >> s.bytes_sent >> s.bytes_copied >> s.peak_staging >> s.executor_seconds >>
        s.bytes_read_direct >> s.instant_ns >> s.known_ns >> s.bytes_delivered >> s.bytes_quantized_direct >>
        s.bytes_read_packed >> paths)) {
    return InvalidArgument(what);
  }
  if (s.bytes_delivered < 0) return InvalidArgument(what + ": negative bytes delivered");
  if (s.bytes_quantized_direct < 0) return InvalidArgument(what + ": negative bytes quantized");
  if (s.bytes_read_packed < 0) return InvalidArgument(what + ": negative bytes read packed");
  if (paths > kMaxPaths) {
    return InvalidArgument(what + ": " + std::to_string(paths) + " transports, at most " + std::to_string(kMaxPaths));
  }
  for (size_t i = 0; i < paths; ++i) {
    std::string name;
    TransportTraffic t;
    if (!(in >> name >> t.bytes_sent >> t.messages_sent >> t.bytes_received >> t.messages_received)) {
      return InvalidArgument(what + ": transport entry " + std::to_string(i) + " is cut short");
    }
    if (!IsPathName(name) || t.bytes_sent < 0 || t.messages_sent < 0 || t.bytes_received < 0 ||
        t.messages_received < 0) {
      return InvalidArgument(what + ": transport entry " + std::to_string(i) + " ('" + name.substr(0, kMaxPathName) +
                             "') has a bad name or a negative count");
    }
    s.by_transport[name] = t;
  }
  return s;
}

Result<RefitSample> ShareSample(Store& store, const std::string& key, int rank, int size,
                                const RankSample& sample, Deadline deadline,
                                const std::function<Status()>& published) {
  const std::string encoded = sample.Encode();
  FERRY_RETURN_IF_ERROR(store.Set(
      key + "/rank" + std::to_string(rank),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()), deadline));
  FERRY_RETURN_IF_ERROR(published());
  if (rank != 0) return RefitSample{};
  std::vector<RankSample> samples;
  for (int r = 0; r < size; ++r) {
    FERRY_ASSIGN_OR_RETURN(Bytes value, store.Get(key + "/rank" + std::to_string(r), deadline));
    FERRY_ASSIGN_OR_RETURN(RankSample s, RankSample::Decode(std::string(value.begin(), value.end())));
    samples.push_back(std::move(s));
  }
  return AggregateSamples(samples);
}

RefitSample AggregateSamples(const std::vector<RankSample>& samples) {
  RefitSample all;
  if (samples.empty()) return all;
  const int64_t instant = samples.front().instant_ns;
  int64_t first_start = INT64_MAX, last_start = INT64_MIN, last_end = INT64_MIN, last_known = INT64_MIN;
  for (const RankSample& s : samples) {
    first_start = std::min(first_start, s.start_ns);
    last_start = std::max(last_start, s.start_ns);
    last_end = std::max(last_end, s.end_ns);
    last_known = std::max(last_known, s.known_ns);
    all.bytes_sent += s.bytes_sent;
    all.bytes_copied += s.bytes_copied;
    all.bytes_read_direct += s.bytes_read_direct;
    all.bytes_quantized_direct += s.bytes_quantized_direct;
    all.bytes_read_packed += s.bytes_read_packed;
    all.bytes_delivered += s.bytes_delivered;
    for (const auto& [name, traffic] : s.by_transport) all.by_transport[name] += traffic;
    all.longest_rank_seconds = std::max(all.longest_rank_seconds, s.executor_seconds);
    all.peak_staging_max = std::max(all.peak_staging_max, s.peak_staging);
    all.peak_staging_sum += s.peak_staging;
  }
  all.seconds = static_cast<double>(last_end - std::min(instant, first_start)) * 1e-9;
  all.start_spread_seconds = static_cast<double>(last_start - instant) * 1e-9;
  all.start_slack_seconds = static_cast<double>(instant - last_known) * 1e-9;
  return all;
}

VariantSummary Summarize(const RunVariant& variant, const std::vector<RefitSample>& samples) {
  VariantSummary s;
  s.variant = variant;
  s.best = 1e30;
  for (const RefitSample& r : samples) {
    s.mean += r.seconds / static_cast<double>(samples.size());
    s.mean_start_spread += r.start_spread_seconds / static_cast<double>(samples.size());
    s.best = std::min(s.best, r.seconds);
  }
  if (!samples.empty()) s.last = samples.back();
  return s;
}

int64_t MemcpyReferenceBytes(int64_t delivered) {
  return std::clamp<int64_t>(delivered, int64_t{1} << 20, int64_t{1} << 30);
}

double MeasureMemcpy(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, int64_t{1} << 20);
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  constexpr int kPasses = 7;
  std::vector<double> seconds;
  for (int i = 0; i < kPasses; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(b.get(), a.get(), bytes);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (b[bytes / 2] != 1) std::abort();  // keeps the copy observable
  }
  std::nth_element(seconds.begin(), seconds.begin() + kPasses / 2, seconds.end());
  return static_cast<double>(bytes) / seconds[kPasses / 2];
}

namespace {

const VariantSummary* Find(const std::vector<VariantSummary>& summaries, Strategy strategy, bool direct_reads) {
  for (const VariantSummary& s : summaries) {
    if (s.variant.strategy == strategy && s.variant.direct_reads == direct_reads) return &s;
  }
  return nullptr;
}

// The ratios that mean something: reshard against the baseline on the same footing (both
// through the transport), and reshard as it runs by default (direct reads) against the baseline.
std::string Ratios(const std::vector<VariantSummary>& summaries, int iterations) {
  const VariantSummary* baseline = Find(summaries, Strategy::kGatherBroadcast, false);
  if (baseline == nullptr) baseline = Find(summaries, Strategy::kGatherBroadcast, true);
  if (baseline == nullptr) return "";
  std::string out;
  char line[256];
  if (const VariantSummary* transport = Find(summaries, Strategy::kReshard, false)) {
    std::snprintf(line, sizeof line,
                  "  reshard is %s than gather-broadcast, both through the transport alone "
                  "(direct reads off)\n",
                  FormatSpeedup(transport->mean, baseline->mean).c_str());
    out += line;
  }
  if (const VariantSummary* direct = Find(summaries, Strategy::kReshard, true)) {
    std::snprintf(line, sizeof line,
                  "  reshard with direct reads between ranks of one node is %s than "
                  "gather-broadcast\n",
                  FormatSpeedup(direct->mean, baseline->mean).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "  (mean of %d refits each, same transport, same run)\n", iterations);
  return out.empty() ? "" : out + line;
}

// Every transport (and the direct-read path) that moved bytes in any variant, sorted.
std::set<std::string> PathNames(const std::vector<VariantSummary>& summaries) {
  std::set<std::string> names;
  for (const VariantSummary& s : summaries) {
    for (const auto& [name, traffic] : s.last.by_transport) names.insert(name);
  }
  return names;
}

}  // namespace

std::string FormatRunReport(const std::string& description, int64_t delivered, double memcpy_bps,
                            const std::vector<VariantSummary>& summaries, int iterations) {
  std::string out = "\n" + description + "\n";
  char cell[64];
  auto row = [&](const char* label, auto value) {
    std::snprintf(cell, sizeof cell, "  %-26s", label);
    out += cell;
    for (const VariantSummary& s : summaries) {
      std::snprintf(cell, sizeof cell, " %24s", value(s).c_str());
      out += cell;
    }
    out += "\n";
  };
  auto text = [](const char* format, double value) {
    char buf[48];
    std::snprintf(buf, sizeof buf, format, value);
    return std::string(buf);
  };
  auto bytes = [](int64_t n) { return FormatBytes(static_cast<double>(n)); };
  const double total = static_cast<double>(delivered);
  row("", [](const VariantSummary& s) { return s.variant.name; });
  row("refit time (mean)", [](const VariantSummary& s) { return FormatSeconds(s.mean, 1, false); });
  row("refit time (best)", [](const VariantSummary& s) { return FormatSeconds(s.best, 1, false); });
  row("ranks' start spread (mean)",
      [](const VariantSummary& s) { return FormatSeconds(s.mean_start_spread, 1, false); });
  row("slowest rank's own run",
      [](const VariantSummary& s) { return FormatSeconds(s.last.longest_rank_seconds, 1, false); });
  row("bandwidth (mean)", [&](const VariantSummary& s) { return text("%.2f GB/s", total / s.mean / 1e9); });
  row("vs memcpy", [&](const VariantSummary& s) { return text("%.0f%%", 100.0 * total / s.mean / memcpy_bps); });
  row("delivered", [&](const VariantSummary&) { return bytes(delivered); });
  row("sent by transports", [&](const VariantSummary& s) { return bytes(s.last.bytes_sent); });
  row("read from peers directly", [&](const VariantSummary& s) { return bytes(s.last.bytes_read_direct); });
  row("  of which quantized as read", [&](const VariantSummary& s) { return bytes(s.last.bytes_quantized_direct); });
  row("  of which packed by senders", [&](const VariantSummary& s) { return bytes(s.last.bytes_read_packed); });
  for (const std::string& path : PathNames(summaries)) {
    const std::string label = "received over " + path;
    row(label.c_str(), [&](const VariantSummary& s) {
      auto it = s.last.by_transport.find(path);
      if (it == s.last.by_transport.end()) return std::string("-");
      return bytes(it->second.bytes_received) + " in " + std::to_string(it->second.messages_received) + " msgs";
    });
  }
  row("copied in ranks", [&](const VariantSummary& s) { return bytes(s.last.bytes_copied); });
  row("peak staging/rank", [&](const VariantSummary& s) { return bytes(s.last.peak_staging_max); });
  row("peak staging sum", [&](const VariantSummary& s) { return bytes(s.last.peak_staging_sum); });
  out += "  bandwidth = bytes delivered to destination fragments / time from the instant every rank was to "
         "start at to the last rank's end\n";
  out += "  start spread = how late the last rank started after that instant\n";
  out += "  received over <path> = plan bytes (and messages) that transport, or direct reads, carried in the "
         "last refit, all ranks\n";
  out += "  vs memcpy = that bandwidth / one thread's memcpy of buffers of the delivered size, at most 1 GiB "
         "(median of 7)\n";
  return out + Ratios(summaries, iterations);
}

}  // namespace ferry::cli
