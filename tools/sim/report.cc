// Text, Chrome-trace and SVG reports of a SimResult.
#include "tools/sim/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/base/strings.h"

namespace ferry::sim {

std::string UtilisationTable(const SimResult& result) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "  %-11s %11s %12s %10s %10s\n", "link class", "links used",
                "bytes", "mean util", "max util");
  out << line;
  for (const LinkClassUsage& u : result.utilisation) {
    std::snprintf(line, sizeof line, "  %-11s %5d/%-5d %12s %9.1f%% %9.1f%%\n",
                  std::string(ResourceKindName(u.kind)).c_str(), u.links_used, u.links_total,
                  FormatBytes(u.bytes).c_str(), 100 * u.mean_utilisation,
                  100 * u.max_utilisation);
    out << line;
  }
  return out.str();
}

namespace {

// "send r3->r17 ..." -> "send r3": the kind and rank that identify a run of similar steps.
std::string StepKey(const std::string& description) {
  size_t space = description.find(' ');
  if (space == std::string::npos) return description;
  size_t end = description.find_first_of(" -", space + 1);
  return description.substr(0, end);
}

}  // namespace

std::string CriticalPathText(const SimResult& result, int max_lines) {
  struct Run {
    std::string text;
    double start, end;
    int count;
  };
  std::vector<Run> runs;
  for (const CriticalStep& s : result.critical_path) {
    if (!runs.empty() && StepKey(runs.back().text) == StepKey(s.description)) {
      runs.back().end = s.end;
      ++runs.back().count;
      continue;
    }
    runs.push_back({s.description, s.start, s.end, 1});
  }
  std::ostringstream out;
  auto print = [&out](const Run& r) {
    out << "  [" << FormatSeconds(r.start) << " .. " << FormatSeconds(r.end) << "] " << r.text;
    if (r.count > 1) out << "  (+" << r.count - 1 << " more like it)";
    out << "\n";
  };
  const int n = static_cast<int>(runs.size());
  if (n <= max_lines) {
    for (const Run& r : runs) print(r);
  } else {
    int head = max_lines / 2, tail = max_lines - head;
    for (int i = 0; i < head; ++i) print(runs[i]);
    out << "  ... " << n - head - tail << " more steps ...\n";
    for (int i = n - tail; i < n; ++i) print(runs[i]);
  }
  return out.str();
}

Result<std::string> ChromeTraceJson(const TransferPlan& plan, const SimResult& result,
                                    int64_t max_events) {
  if (result.op_times.size() != plan.ops.size()) {
    return FailedPrecondition("the simulation did not record op times (SimOptions::record_op_times)");
  }
  std::vector<int> order(plan.ops.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return result.op_times[a].start < result.op_times[b].start;
  });
  if (static_cast<int64_t>(order.size()) > max_events) order.resize(max_events);
  const int gpn = result.cluster.gpus_per_node;
  std::string out;
  out.reserve(order.size() * 160 + 64);
  out += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  char buf[512];
  bool first = true;
  for (int id : order) {
    const Op& op = plan.ops[id];
    const OpTime& t = result.op_times[id];
    int gpu = result.mapping.gpu_of_rank[op.rank];
    std::string name(OpKindName(op.kind));
    if (op.peer >= 0) name += (op.kind == OpKind::kRecv ? " <- r" : " -> r") + std::to_string(op.peer);
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":%d,\"bytes\":%lld,\"ready_us\":%.3f}}",
                  first ? "" : ",", name.c_str(), std::string(OpKindName(op.kind)).c_str(),
                  gpu / gpn, op.rank, t.start * 1e6, std::max(0.0, t.end - t.start) * 1e6, id,
                  static_cast<long long>(op.bytes), t.ready * 1e6);
    out += buf;
    first = false;
  }
  out += "]}\n";
  return out;
}

namespace {

// One line of the ingress chart: GB/s in each time bucket.
struct IngressLine {
  std::string label;
  std::vector<double> gbps;
};

// The first `used` buckets of each node's ingress as GB/s, one line a node, or with more than
// `max_lines` nodes the min, mean and max over them.
std::vector<IngressLine> IngressLines(const std::vector<std::vector<double>>& series, double dt, int used,
                                      int max_lines) {
  auto rate = [&](const std::vector<double>& s, int b) { return s[b] / dt / 1e9; };
  std::vector<IngressLine> lines;
  if (static_cast<int>(series.size()) <= max_lines) {
    for (size_t n = 0; n < series.size(); ++n) {
      IngressLine l{"node " + std::to_string(n), {}};
      for (int b = 0; b < used; ++b) l.gbps.push_back(rate(series[n], b));
      lines.push_back(std::move(l));
    }
    return lines;
  }
  IngressLine lo{"min over nodes", {}}, mean{"mean over nodes", {}}, hi{"max over nodes", {}};
  for (int b = 0; b < used; ++b) {
    double mn = 1e300, mx = 0, sum = 0;
    for (const auto& s : series) {
      double v = rate(s, b);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    lo.gbps.push_back(mn);
    mean.gbps.push_back(sum / series.size());
    hi.gbps.push_back(mx);
  }
  return {lo, mean, hi};
}

// The ingress chart's geometry.
constexpr double kIngressW = 900, kIngressH = 420, kIngressLeft = 70, kIngressRight = 170,
                 kIngressTop = 40, kIngressBottom = 50;
constexpr double kIngressPw = kIngressW - kIngressLeft - kIngressRight;
constexpr double kIngressPh = kIngressH - kIngressTop - kIngressBottom;

// The chart's header, title, axes and ticks (five on each, y up to `ymax` GB/s, time up to
// `tmax`).
void IngressFrame(const SimResult& result, double ymax, double tmax, std::ostringstream& out) {
  const double w = kIngressW, h = kIngressH, left = kIngressLeft, top = kIngressTop;
  const double pw = kIngressPw, ph = kIngressPh;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">Network ingress per node ("
      << result.cluster.name << ", " << FormatSeconds(result.total_time) << " total)</text>\n";
  out << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\""
      << top + ph << "\" stroke=\"black\"/>\n";
  out << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph
      << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    double y = top + ph - ph * i / 4;
    double x = left + pw * i / 4;
    char label[64];
    std::snprintf(label, sizeof label, "%.0f", ymax * i / 4);
    out << "<text x=\"" << left - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << label
        << "</text>\n";
    out << "<text x=\"" << x << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">"
        << FormatSeconds(tmax * i / 4) << "</text>\n";
  }
  out << "<text x=\"16\" y=\"" << top + ph / 2 << "\" transform=\"rotate(-90 16 " << top + ph / 2
      << ")\" text-anchor=\"middle\">GB/s</text>\n";
  out << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 10
      << "\" text-anchor=\"middle\">time</text>\n";
}

// `lines` as steps over `used` buckets, each in its colour with its label right of the plot.
void IngressPolylines(const std::vector<IngressLine>& lines, int used, double ymax, std::ostringstream& out) {
  static const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const double left = kIngressLeft, top = kIngressTop, pw = kIngressPw, ph = kIngressPh;
  for (size_t i = 0; i < lines.size(); ++i) {
    const char* colour = kColours[i % 10];
    out << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"";
    for (int b = 0; b < used; ++b) {
      double x0 = left + pw * b / used, x1 = left + pw * (b + 1) / used;
      double y = top + ph - ph * lines[i].gbps[b] / ymax;
      out << x0 << "," << y << " " << x1 << "," << y << " ";
    }
    out << "\"/>\n";
    out << "<text x=\"" << left + pw + 10 << "\" y=\"" << top + 14 * (i + 1) << "\" fill=\""
        << colour << "\">" << lines[i].label << "</text>\n";
  }
}

}  // namespace

Result<std::string> IngressSvg(const SimResult& result, int max_lines) {
  const auto& series = result.ingress.bytes;
  if (series.empty() || result.ingress.bucket_seconds <= 0) {
    return FailedPrecondition("the simulation did not record ingress (SimOptions::record_ingress)");
  }
  const double dt = result.ingress.bucket_seconds;
  const int buckets = static_cast<int>(series[0].size());
  int used = 1;  // buckets up to the end of the run
  while (used < buckets && used * dt < result.total_time) ++used;
  const std::vector<IngressLine> lines = IngressLines(series, dt, used, max_lines);
  double ymax = 1e-9;
  for (const IngressLine& l : lines) {
    for (double v : l.gbps) ymax = std::max(ymax, v);
  }
  ymax *= 1.1;
  std::ostringstream out;
  IngressFrame(result, ymax, used * dt, out);
  IngressPolylines(lines, used, ymax, out);
  out << "</svg>\n";
  return out.str();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return IoError("cannot open '" + path + "' for writing");
  out << text;
  if (!out) return IoError("failed writing '" + path + "'");
  return Status::Ok();
}

}  // namespace ferry::sim
