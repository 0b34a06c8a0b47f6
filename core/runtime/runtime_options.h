// The communicator's options: which transport serves each link class, and the deadlines of
// bootstrap, store requests, refits and abort. The executor's options are ExecutorOptions
// (executor_options.h); each transport's come with its registration (transport.h).
#pragma once

#include <vector>

#include "core/base/config.h"

namespace ferry {

// transport.network, transport.intra_node, transport.same_rank, deadline.*.
const std::vector<OptionSpec>& CoreOptions();

// Every deadline.* option of `config` is a duration above zero (Config::GetSeconds also refuses
// NaN, infinity and more than kMaxDurationSeconds). Session::Join checks this before it waits on
// anything, so that a bad value fails there, naming the option, rather than when an abort or a
// store request first reads it.
Status CheckCoreOptions(const Config& config);

}  // namespace ferry
