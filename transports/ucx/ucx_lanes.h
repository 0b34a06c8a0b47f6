// What UCX actually moves bytes over: the lanes a UCP endpoint selected, read from
// ucp_ep_print_info (UCX 1.13 has no ucp_ep_query for transports), and the check of those lanes
// against the transports ucx.tls asked for. UCX silently drops transports that cannot honour the
// endpoint's error mode: in ucx.error_mode=peer, UCX 1.13 leaves out its shared-memory transports,
// so "ucx.tls=sm,tcp" between processes of one host runs over tcp on the loopback device.
//
// Pure functions apart from EndpointLanes (which asks UCX); thread-compatible.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <ucp/api/ucp.h>

namespace ferry::ucx {

// The "transport/device" of every lane in ucp_ep_print_info's text, in lane order, without the
// path index: "tcp/lo", "posix/memory". The lane lines are written by ucp_ep_config_lane_info_str
// (openucx/ucx src/ucp/core/ucp_ep.c, v1.13.1) as
//   "#                 lane[0]:  3:tcp/lo.0 md[1]          -> md[1]/tcp/sysdev[255] am am_bw#0"
// Lines of other shapes (connection-manager lanes, headers, protocol tables) are skipped.
std::vector<std::string> ParseLanes(std::string_view print_info);

// ParseLanes of `ep`'s ucp_ep_print_info, captured in memory. Empty if UCX printed nothing.
std::vector<std::string> EndpointLanes(ucp_ep_h ep);

// Whether ucx.tls (UCX_TLS syntax, comma-separated) asks for a shared-memory transport: "sm",
// "shm", or one of posix, sysv, cma, knem, xpmem.
bool AsksForSharedMemory(std::string_view tls);

// Whether one of `lanes` is a shared-memory transport (device "memory", not "self").
bool UsesSharedMemory(const std::vector<std::string>& lanes);

// Whether `lanes` reach the peer through the loopback device: the peer is on this host, so
// shared memory could have carried the bytes.
bool ThroughLoopback(const std::vector<std::string>& lanes);

// "tcp/lo to peers 1,2; posix/memory+sysv/memory to peer 3": peers grouped by their lane set.
std::string SummarizeLanes(const std::map<int, std::vector<std::string>>& lanes_of_peer);

}  // namespace ferry::ucx
