// The communicator's options: which transport serves each link class, and the deadlines of
// bootstrap, store requests, refits and abort. The executor's options are ExecutorOptions
// (executor_options.h); each transport's come with its registration (transport.h).
#pragma once

#include <vector>

#include "core/base/config.h"

namespace ferry {

// transport.network, transport.intra_node, transport.same_rank, deadline.*.
const std::vector<OptionSpec>& CoreOptions();

}  // namespace ferry
