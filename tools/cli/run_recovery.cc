// Recovery inside `ferry run --recover` (see run_recovery.h). Store keys, per epoch E that a
// recovery reconnected: run/recover/eE/rank<r> = "s <variant> <iteration> <detected ns> <ran it>
// <reason>" from a survivor (<ran it> 1 when its last Run was that refit's, else 0) or "r <joined ns>" from a replacement; run/fault/eE = "<rank> <ns> <what>"
// from a rank about to fail on purpose in epoch E, and counter run/fault/fired/<index> at 1 once
// that fault of the list fired; counter run/recovery/count and run/recovery/<n> (from 1) = the
// n-th recovery's summary line.
#include "tools/cli/run_recovery.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>

namespace ferry::cli {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status SetText(Store& store, const std::string& key, const std::string& text, Deadline deadline) {
  return store.Set(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
                   deadline);
}

constexpr char kRecoveryCount[] = "run/recovery/count";

std::string FiredKey(const Fault& fault) { return "run/fault/fired/" + std::to_string(fault.index); }

// One rank's entry of a recovery.
struct Entry {
  int rank = 0;
  bool replacement = false;
  RunPoint point;
  bool ran_it = false;  // a survivor's last Run was the refit at `point`
  int64_t ns = 0;       // a survivor's detection, a replacement's join
  std::string reason;  // a survivor's abort reason
};

Result<Entry> ParseEntry(int rank, const std::string& text) {
  Entry e;
  e.rank = rank;
  long long ns = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "r %lld%n", &ns, &used) == 1) {
    e.replacement = true;
  } else if (int ran = -1; std::sscanf(text.c_str(), "s %d %d %lld %d %n", &e.point.variant, &e.point.iteration, &ns,
                                      &ran, &used) == 4 &&
                         (ran == 0 || ran == 1)) {
    e.ran_it = ran == 1;
    e.reason = text.substr(static_cast<size_t>(used));
  } else {
    return Internal("recovery: rank " + std::to_string(rank) + "'s entry '" + text + "' is malformed");
  }
  e.ns = ns;
  return e;
}

// Publishes this rank's entry for the epoch the communicator is now at, waits for every rank's,
// and returns them all.
Result<std::vector<Entry>> Exchange(const RecoveryContext& c, const std::string& mine) {
  Communicator& comm = c.session.communicator();
  const std::string prefix = "run/recover/e" + std::to_string(comm.epoch()) + "/";
  const Deadline deadline = Deadline::AfterSeconds(c.store_seconds);
  FERRY_RETURN_IF_ERROR(SetText(c.session.store(), prefix + "rank" + std::to_string(c.rank), mine, deadline));
  FERRY_RETURN_IF_ERROR(comm.Barrier(prefix + "entries", deadline));
  std::vector<Entry> entries;
  for (int r = 0; r < c.size; ++r) {
    FERRY_ASSIGN_OR_RETURN(Bytes value, c.session.store().Get(prefix + "rank" + std::to_string(r), deadline));
    FERRY_ASSIGN_OR_RETURN(Entry e, ParseEntry(r, std::string(value.begin(), value.end())));
    entries.push_back(std::move(e));
  }
  return entries;
}

std::string ReportedKey(const RunPoint& point) {
  return "run/reported/" + std::to_string(point.variant) + "/" + std::to_string(point.iteration);
}

// The earliest point a survivor did not finish, or, when rank 0 reports refits one by one, the
// first refit before it that rank 0 did not report (it died before it could). Every rank reads
// the same: rank 0 marks a refit before it starts the next, and reaches no recovery unmarked.
// Resumed by RunRest when every survivor failed in that refit's own Run (Resumption).
Result<Resumption> ResumePoint(const RecoveryContext& c, const std::vector<Entry>& entries) {
  RunPoint resume{std::numeric_limits<int>::max(), 0};
  for (const Entry& e : entries) {
    if (!e.replacement) resume = std::min(resume, e.point);
  }
  if (resume.variant == std::numeric_limits<int>::max()) return Internal("recovery: no survivor said where it was");
  const Deadline deadline = Deadline::AfterSeconds(c.store_seconds);
  while (c.reported_from >= 0 && resume.iteration > c.reported_from) {
    const RunPoint before{resume.variant, resume.iteration - 1};
    FERRY_ASSIGN_OR_RETURN(const int64_t reported, c.session.store().Add(ReportedKey(before), 0, deadline));
    if (reported > 0) break;
    resume = before;
  }
  const bool rest = c.rest_allowed && std::all_of(entries.begin(), entries.end(), [&](const Entry& e) {
                      return e.replacement || (e.ran_it && e.point == resume);
                    });
  return Resumption{resume, rest};
}

// Rank 0: the fault, who detected it when, and the new epoch; the summary line into the store.
Status Report(const RecoveryContext& c, const std::vector<Entry>& entries, const Resumption& resumption) {
  const RunPoint& resume = resumption.point;
  const std::string resuming = c.describe(resume) + (resumption.rest ? " (only what it left undelivered)" : "");
  Communicator& comm = c.session.communicator();
  const std::string fault_key = "run/fault/e" + std::to_string(comm.epoch() - 1);
  auto fault = c.session.store().Get(fault_key, Deadline::AfterSeconds(1));
  int faulty = -1;
  long long fault_ns = 0;
  int used = 0;
  std::string what;
  if (fault.ok()) {
    const std::string text(fault->begin(), fault->end());
    if (std::sscanf(text.c_str(), "%d %lld %n", &faulty, &fault_ns, &used) == 2) what = text.substr(used);
  }
  if (!what.empty()) c.say("  fault injected: rank " + std::to_string(faulty) + " " + what);
  // An error names the culprit as "rank N ..." (the monitor, an abort) or "peer N ..." (a link).
  const std::string culprit = "rank " + std::to_string(faulty) + " ", link = "peer " + std::to_string(faulty) + " ";
  bool all_named = faulty >= 0;
  double slowest_ms = 0;
  std::string replacements;
  for (const Entry& e : entries) {
    if (e.replacement) {
      replacements += (replacements.empty() ? "" : ", ") + std::to_string(e.rank);
      continue;
    }
    const double ms = fault_ns > 0 ? static_cast<double>(e.ns - fault_ns) * 1e-6 : -1;
    slowest_ms = std::max(slowest_ms, ms);
    const bool named =
        faulty >= 0 && (e.reason.find(culprit) != std::string::npos || e.reason.find(link) != std::string::npos);
    all_named = all_named && named;
    char head[96];
    if (ms >= 0) {
      std::snprintf(head, sizeof head, "  detected by rank %d after %.0f ms%s: ", e.rank, ms, named ? ", names the culprit" : "");
    } else {
      std::snprintf(head, sizeof head, "  rank %d aborted: ", e.rank);
    }
    c.say(head + e.reason.substr(0, 200));
  }
  const double recovered_s = fault_ns > 0 ? static_cast<double>(NowNanos() - fault_ns) * 1e-9 : -1;
  char line[512];
  std::snprintf(line, sizeof line, "  epoch %llu: every rank reconnected%s%s; resuming at %s",
                static_cast<unsigned long long>(comm.epoch()),
                replacements.empty() ? " (no replacement)" : (", replacement rank " + replacements + " joined").c_str(),
                recovered_s >= 0 ? (", " + std::to_string(static_cast<int>(recovered_s * 1000)) + " ms after the fault").c_str()
                                 : "",
                resuming.c_str());
  c.say(line);
  const Deadline deadline = Deadline::AfterSeconds(c.store_seconds);
  FERRY_ASSIGN_OR_RETURN(const int64_t n, c.session.store().Add(kRecoveryCount, 1, deadline));
  std::snprintf(line, sizeof line,
                "recovery %lld: %s; %s; replaced rank %s; epoch %llu; resumed at %s", static_cast<long long>(n),
                what.empty() ? "a refit failed" : ("rank " + std::to_string(faulty) + " " + what).c_str(),
                faulty < 0 ? "culprit unknown"
                           : (std::string(all_named ? "every survivor named rank " : "NOT every survivor named rank ") +
                              std::to_string(faulty) + " within " + std::to_string(std::lround(slowest_ms)) + " ms")
                                 .c_str(),
                replacements.empty() ? "none" : replacements.c_str(), static_cast<unsigned long long>(comm.epoch()),
                resuming.c_str());
  return SetText(c.session.store(), "run/recovery/" + std::to_string(n), line, deadline);
}

}  // namespace

Result<std::vector<std::string>> RecoveryLog(const RecoveryContext& c) {
  const Deadline deadline = Deadline::AfterSeconds(c.store_seconds);
  FERRY_ASSIGN_OR_RETURN(const int64_t count, c.session.store().Add(kRecoveryCount, 0, deadline));
  std::vector<std::string> lines;
  for (int64_t n = 1; n <= count; ++n) {
    FERRY_ASSIGN_OR_RETURN(Bytes line, c.session.store().Get("run/recovery/" + std::to_string(n), deadline));
    lines.emplace_back(line.begin(), line.end());
  }
  return lines;
}

Status MarkReported(const RecoveryContext& c, const RunPoint& point) {
  return c.session.store().Add(ReportedKey(point), 1, Deadline::AfterSeconds(c.store_seconds)).status();
}

Status RecordFault(const RecoveryContext& c, const Fault& fault, const RunPoint& point) {
  const char* when = fault.mid_refit ? " during " : fault.at_verify ? " before verifying " : " after ";
  const std::string what = fault.kind + when + c.describe(point);
  const std::string key = "run/fault/e" + std::to_string(c.session.communicator().epoch());
  const Deadline deadline = Deadline::AfterSeconds(c.store_seconds);
  FERRY_RETURN_IF_ERROR(c.session.store().Add(FiredKey(fault), 1, deadline).status());
  return SetText(c.session.store(), key, std::to_string(c.rank) + " " + std::to_string(NowNanos()) + " " + what,
                 deadline);
}

Result<std::vector<Fault>> FaultsLeft(const RecoveryContext& c, const std::vector<Fault>& faults) {
  std::vector<Fault> left;
  for (const Fault& fault : faults) {
    if (fault.rank == c.rank) {
      if (fault.signal == 0) continue;
      FERRY_ASSIGN_OR_RETURN(const int64_t fired,
                             c.session.store().Add(FiredKey(fault), 0, Deadline::AfterSeconds(c.store_seconds)));
      if (fired > 0) continue;
    }
    left.push_back(fault);
  }
  return left;
}

Result<Resumption> RecoverAfterFailure(const RecoveryContext& c, const RunPoint& failed_at, bool ran_failed_refit,
                                       const Status& failure) {
  Communicator& comm = c.session.communicator();
  if (!comm.aborted()) return failure;  // a failure of this rank alone (a wrong byte): nothing to recover
  const int64_t detected_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(comm.aborted_at().time_since_epoch()).count();
  std::string reason = comm.abort_reason().message();
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  if (c.rank == 0) c.say("  " + c.describe(failed_at) + " failed: " + reason.substr(0, 200) + "; recovering");
  FERRY_RETURN_IF_ERROR(comm.Recreate(Deadline::AfterSeconds(c.connect_seconds))
                            .WithContext("rank " + std::to_string(c.rank) + " recovering after " + c.describe(failed_at)));
  FERRY_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                         Exchange(c, "s " + std::to_string(failed_at.variant) + " " +
                                         std::to_string(failed_at.iteration) + " " + std::to_string(detected_ns) +
                                         (ran_failed_refit ? " 1 " : " 0 ") + reason));
  FERRY_ASSIGN_OR_RETURN(Resumption resume, ResumePoint(c, entries));
  if (c.rank == 0) FERRY_RETURN_IF_ERROR(Report(c, entries, resume));
  return resume;
}

Result<Resumption> JoinAsReplacement(const RecoveryContext& c) {
  FERRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Exchange(c, "r " + std::to_string(NowNanos())));
  FERRY_ASSIGN_OR_RETURN(Resumption resume, ResumePoint(c, entries));
  if (c.rank == 0) FERRY_RETURN_IF_ERROR(Report(c, entries, resume));
  return resume;
}

}  // namespace ferry::cli
