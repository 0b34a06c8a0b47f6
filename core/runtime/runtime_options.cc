// The communicator's option table.
#include "core/runtime/runtime_options.h"

namespace ferry {

const std::vector<OptionSpec>& CoreOptions() {
  static const std::vector<OptionSpec>* options = new std::vector<OptionSpec>{
      {"transport.network", "tcp",
       "transport between ranks on different nodes (tcp, ucx, libfabric, ...)"},
      {"transport.intra_node", "tcp",
       "transport between ranks on the same node (tcp, ucx, libfabric, local, ...)"},
      {"transport.same_rank", "local", "transport for messages a rank sends to itself"},
      {"deadline.connect", "60s", "bootstrap: store rendezvous and transport connection"},
      {"deadline.refit", "300s", "one refit (executing a plan) from start to finish"},
      {"deadline.abort", "5s", "Communicator::Abort returns within this"},
      {"deadline.store", "60s", "one store request (set, get, barrier)"},
      {"deadline.heartbeat", "100ms",
       "interval of the peer monitor's heartbeats; an abort reaches every rank within about this"},
      {"deadline.peer_dead", "5s",
       "a peer that stops (hung, unreachable) fails the communicator within this, naming it "
       "(after peer_dead - 2 heartbeats of silence; at least 4 heartbeats); a dead peer's closed "
       "connection is seen at once; store requests to a stopped store host fail within it too"},
      {"watch.host", "",
       "address the peer monitor listens on and advertises (empty: tcp.host, else this host's "
       "first non-loopback address)"},
  };
  return *options;
}

Status CheckCoreOptions(const Config& config) {
  for (const OptionSpec& option : CoreOptions()) {
    if (option.name.rfind("deadline.", 0) != 0) continue;
    FERRY_ASSIGN_OR_RETURN(double seconds, config.GetSeconds(option.name));
    if (!(seconds > 0)) {
      return InvalidArgument("option '" + option.name + "' is " + std::to_string(seconds) +
                             " s; it must be above zero");
    }
  }
  return Status::Ok();
}

}  // namespace ferry
