// AnnounceAndSignal: the announced self-kill/stop shared by the fault transport and ferry run.
#include "transports/fault/fault_signal.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace ferry::fault {

void AnnounceAndSignal(int rank, std::string_view kind) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  const std::string name(kind);
  std::fprintf(stderr, "ferry-fault: rank %d %s at %lld\n", rank, name.c_str(), static_cast<long long>(ns));
  std::fflush(stderr);
  ::kill(::getpid(), name == "kill" ? SIGKILL : SIGSTOP);
}

}  // namespace ferry::fault
