// The `local` transport: ranks that are threads of one process (tests, and a rank talking to
// itself). Two-sided and one-sided (put-with-notify), host memory, copies with memcpy. Ranks find
// each other through TransportContext::group_key; a rank whose transport is destroyed counts as
// exited, and its peers' requests with it fail with kUnavailable.
#pragma once

#include <memory>

#include "core/runtime/transport.h"

namespace ferry {

Result<std::unique_ptr<Transport>> CreateLocalTransport(const TransportContext& context);
TransportRegistration LocalTransportRegistration();

}  // namespace ferry
