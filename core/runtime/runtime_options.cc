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
  };
  return *options;
}

}  // namespace ferry
