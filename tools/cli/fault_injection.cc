// Fault injection for `ferry run` (see fault_injection.h): parsing FERRY_INJECT_FAULT and firing.
#include "tools/cli/fault_injection.h"

#include "core/cuda/batched_copy.h"
#include "transports/fault/fault_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <thread>

namespace ferry::cli {
namespace {

// Fires at most once per process: a `mid` fault's thread and the refit's end may both reach it.
void Fire(const Fault& fault, int rank) {
  static std::once_flag fired;
  std::call_once(fired, [&] { fault::AnnounceAndSignal(rank, fault.kind); });
}

}  // namespace

Result<Fault> ParseFault(const std::string& spec, const std::string& source) {
  Fault fault;
  if (spec.empty()) return fault;
  const std::string where = source + "='" + spec + "'";
  const size_t first = spec.find(':');
  const size_t second = first == std::string::npos ? first : spec.find(':', first + 1);
  if (second == std::string::npos) {
    return InvalidArgument(where + ": expected <rank>:<kill|stop>:<mid|between|mid=N|verify=N|after=N> or "
                           "<rank>:corrupt:verify");
  }
  char* end = nullptr;
  const long rank = std::strtol(spec.c_str(), &end, 10);
  const std::string kind = spec.substr(first + 1, second - first - 1);
  const std::string moment = spec.substr(second + 1);
  if (end != spec.c_str() + first || rank < 0 || rank > 1 << 20) {
    return InvalidArgument(where + ": the rank is not a number");
  }
  if (kind != "kill" && kind != "stop" && kind != "corrupt") {
    return InvalidArgument(where + ": the fault is kill, stop or corrupt");
  }
  if (kind == "corrupt" && moment != "verify") return InvalidArgument(where + ": corrupt happens at verify");
  fault.rank = static_cast<int>(rank);
  fault.kind = kind;
  fault.signal = kind == "kill" ? SIGKILL : kind == "stop" ? SIGSTOP : 0;
  if (kind == "corrupt") return fault;
  const size_t equals = moment.find('=');
  const std::string when = moment.substr(0, equals);
  if (when != "mid" && when != "between" && when != "after" && when != "verify") {
    return InvalidArgument(where + ": the moment is mid, between, mid=N, verify=N or after=N");
  }
  fault.mid_refit = when == "mid";
  fault.at_verify = when == "verify";
  if (equals == std::string::npos) {
    if (when == "after" || when == "verify") {
      return InvalidArgument(where + ": " + when + " needs the refit: " + when + "=N");
    }
    return fault;
  }
  const std::string number = moment.substr(equals + 1);
  const long refit = std::strtol(number.c_str(), &end, 10);
  if (when == "between" || number.empty() || *end != '\0' || refit < 1 || refit > 1'000'000) {
    return InvalidArgument(where + ": the refit in mid=N, verify=N or after=N is a number from 1 (a measured refit)");
  }
  fault.refit = static_cast<int>(refit);
  return fault;
}

Result<std::vector<Fault>> ParseFaults(const std::string& spec, const std::string& source) {
  std::vector<Fault> faults;
  if (spec.empty()) return faults;
  for (size_t begin = 0;;) {
    const size_t comma = spec.find(',', begin);
    const std::string one = spec.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (one.empty()) return InvalidArgument(source + "='" + spec + "': an empty fault between commas");
    if (static_cast<int>(faults.size()) == kMaxFaults) {
      return InvalidArgument(source + ": more than " + std::to_string(kMaxFaults) + " faults (kMaxFaults)");
    }
    FERRY_ASSIGN_OR_RETURN(Fault fault, ParseFault(one, source));
    fault.index = static_cast<int>(faults.size());
    faults.push_back(fault);
    if (comma == std::string::npos) return faults;
    begin = comma + 1;
  }
}

Result<std::vector<Fault>> FaultsFromEnvironment() {
  const char* text = std::getenv("FERRY_INJECT_FAULT");
  return ParseFaults(text == nullptr ? "" : text, "FERRY_INJECT_FAULT");
}

bool FaultDue(const Fault& fault, int rank, bool starting, int refit) {
  return fault.rank == rank && fault.signal != 0 && !fault.at_verify && fault.mid_refit == starting &&
         fault.refit == refit;
}

bool FaultDueAtVerify(const Fault& fault, int rank, int refit) {
  return fault.rank == rank && fault.signal != 0 && fault.at_verify && fault.refit == refit;
}

void MaybeInjectAtVerify(const Fault& fault, int rank, int refit) {
  if (FaultDueAtVerify(fault, rank, refit)) Fire(fault, rank);
}

void MaybeInjectFault(const Fault& fault, int rank, bool starting, int refit) {
  const bool mid_refit_ended = !starting && fault.mid_refit && fault.rank == rank && fault.signal != 0 &&
                               fault.refit == refit;
  if (mid_refit_ended) return Fire(fault, rank);
  if (!FaultDue(fault, rank, starting, refit)) return;
  if (!starting) return Fire(fault, rank);
  std::thread([fault, rank] { Fire(fault, rank); }).detach();
}

Result<std::string> MaybeCorrupt(const Fault& fault, int rank, const Layout& destination,
                                 const std::vector<char*>& buffers, bool on_device) {
  if (fault.rank != rank || fault.kind != "corrupt") return std::string();
  for (const Fragment& f : destination.fragments) {
    if (f.loc.rank != rank || f.NumElements() == 0) continue;
    if (f.loc.buffer >= static_cast<int>(buffers.size()) || buffers[f.loc.buffer] == nullptr) {
      return InvalidArgument("corrupt: rank " + std::to_string(rank) + " has no memory for its first fragment");
    }
    char* at = buffers[f.loc.buffer] + f.loc.byte_offset;
    char byte = 0;
    if (on_device) FERRY_RETURN_IF_ERROR(cuda::CopyToHost(&byte, at, 1));
    byte = static_cast<char>(byte ^ 1);
    if (on_device) {
      FERRY_RETURN_IF_ERROR(cuda::CopyToDevice(at, &byte, 1));
    } else {
      *at = byte;
    }
    const std::string& tensor = destination.tensors[f.tensor].name;
    std::fprintf(stderr, "ferry-fault: rank %d corrupts tensor '%s'\n", rank, tensor.c_str());
    return tensor;
  }
  return std::string();
}

}  // namespace ferry::cli
