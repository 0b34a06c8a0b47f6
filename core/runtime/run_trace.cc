// RunTrace (core/runtime/run_trace.h).
#include "core/runtime/run_trace.h"

#include <chrono>
#include <cstdio>
#include <string_view>

namespace ferry {
namespace {

constexpr const char* kLaneNames[] = {"set-up", "network", "copies", "gpu kernels"};

// Names come from the executor (op kinds, numbers): no character needs more than this.
std::string Escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

std::string Micros(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", static_cast<double>(ns) / 1e3);
  return text;
}

}  // namespace

int64_t RunTrace::Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void RunTrace::Span(Lane lane, std::string name, int64_t begin_ns, int64_t end_ns, std::string args) {
  events_.push_back({lane, false, begin_ns, end_ns, std::move(name), std::move(args)});
}

void RunTrace::Instant(Lane lane, std::string name, int64_t at_ns, std::string args) {
  events_.push_back({lane, true, at_ns, at_ns, std::move(name), std::move(args)});
}

Status RunTrace::Write(const std::string& path, int rank) const {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Unavailable("trace file " + path + ": cannot be written");
  const std::string pid = std::to_string(rank);
  std::string text = "{\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid +
                     ",\"args\":{\"name\":\"rank " + pid + "\"}}";
  for (int lane = 0; lane < 4; ++lane) {
    text += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(lane) +
            ",\"args\":{\"name\":\"" + kLaneNames[lane] + "\"}}";
  }
  for (const Event& e : events_) {
    text += ",\n{\"ph\":\"" + std::string(e.instant ? "i\",\"s\":\"t" : "X") + "\",\"name\":\"" +
            Escaped(e.name) + "\",\"pid\":" + pid + ",\"tid\":" + std::to_string(static_cast<int>(e.lane)) +
            ",\"ts\":" + Micros(e.begin_ns);
    if (!e.instant) text += ",\"dur\":" + Micros(e.end_ns - e.begin_ns);
    text += ",\"args\":{" + e.args + "}}";
  }
  text += "\n]}\n";
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) return Unavailable("trace file " + path + ": write failed");
  return Status::Ok();
}

}  // namespace ferry
