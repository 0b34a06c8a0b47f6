// Fault injection for `ferry run` (see fault_injection.h): parsing FERRY_INJECT_FAULT and firing.
#include "tools/cli/fault_injection.h"

#include "transports/fault/fault_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

namespace ferry::cli {
namespace {

void Fire(const Fault& fault, int rank) { fault::AnnounceAndSignal(rank, fault.kind); }

}  // namespace

Result<Fault> FaultFromEnvironment() {
  Fault fault;
  const char* text = std::getenv("FERRY_INJECT_FAULT");
  if (text == nullptr || *text == '\0') return fault;
  const std::string spec(text);
  const size_t first = spec.find(':');
  const size_t second = first == std::string::npos ? first : spec.find(':', first + 1);
  if (second == std::string::npos) {
    return InvalidArgument("FERRY_INJECT_FAULT='" + spec + "': expected <rank>:<kill|stop>:<mid|between>");
  }
  char* end = nullptr;
  const long rank = std::strtol(spec.c_str(), &end, 10);
  const std::string kind = spec.substr(first + 1, second - first - 1);
  const std::string moment = spec.substr(second + 1);
  if (end != spec.c_str() + first || rank < 0 || rank > 1 << 20) {
    return InvalidArgument("FERRY_INJECT_FAULT='" + spec + "': the rank is not a number");
  }
  if (kind != "kill" && kind != "stop") {
    return InvalidArgument("FERRY_INJECT_FAULT='" + spec + "': the fault is kill or stop");
  }
  if (moment != "mid" && moment != "between") {
    return InvalidArgument("FERRY_INJECT_FAULT='" + spec + "': the moment is mid or between");
  }
  fault.rank = static_cast<int>(rank);
  fault.kind = kind;
  fault.signal = kind == "kill" ? SIGKILL : SIGSTOP;
  fault.mid_refit = moment == "mid";
  return fault;
}

void MaybeInjectFault(const Fault& fault, int rank, bool starting) {
  if (fault.rank != rank || fault.mid_refit != starting) return;
  if (!starting) return Fire(fault, rank);
  std::thread([fault, rank] { Fire(fault, rank); }).detach();
}

}  // namespace ferry::cli
