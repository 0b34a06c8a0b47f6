// Parsing and checking the lanes UCX selected per endpoint (see ucx_lanes.h).
#include "transports/ucx/ucx_lanes.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace ferry::ucx {
namespace {

// "tcp/lo.0" -> "tcp/lo": the path index follows the device after the last dot.
std::string WithoutPathIndex(const std::string& token) {
  const size_t dot = token.rfind('.');
  if (dot == std::string::npos || dot + 1 == token.size()) return token;
  for (size_t i = dot + 1; i < token.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(token[i]))) return token;
  }
  return token.substr(0, dot);
}

// The lane's "tl/dev.path" after "lane[N]:  R:", or "" when the line is not of that shape.
std::string LaneToken(std::string_view line) {
  const size_t lane = line.find("lane[");
  if (lane == std::string_view::npos) return "";
  size_t at = line.find("]:", lane);
  if (at == std::string_view::npos) return "";
  at += 2;
  while (at < line.size() && line[at] == ' ') ++at;
  const size_t digits = at;
  while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at]))) ++at;
  if (at == digits || at >= line.size() || line[at] != ':') return "";
  const size_t start = at + 1;
  size_t end = start;
  while (end < line.size() && line[end] != ' ') ++end;
  const std::string token(line.substr(start, end - start));
  return token.find('/') == std::string::npos ? "" : token;
}

std::string Transport(const std::string& lane) { return lane.substr(0, lane.find('/')); }
std::string Device(const std::string& lane) { return lane.substr(lane.find('/') + 1); }

}  // namespace

std::vector<std::string> ParseLanes(std::string_view print_info) {
  std::vector<std::string> lanes;
  size_t start = 0;
  while (start < print_info.size()) {
    size_t end = print_info.find('\n', start);
    if (end == std::string_view::npos) end = print_info.size();
    const std::string token = LaneToken(print_info.substr(start, end - start));
    if (!token.empty()) lanes.push_back(WithoutPathIndex(token));
    start = end + 1;
  }
  return lanes;
}

std::vector<std::string> EndpointLanes(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::vector<std::string> lanes = ParseLanes(std::string_view(text, size));
  std::free(text);
  return lanes;
}

bool AsksForSharedMemory(std::string_view tls) {
  static const std::set<std::string> kShared = {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"};
  std::stringstream in{std::string(tls)};
  for (std::string name; std::getline(in, name, ',');) {
    if (!name.empty() && name[0] == '^') return false;  // an exclusion list: nothing asked for
    if (kShared.count(name) != 0) return true;
  }
  return false;
}

bool UsesSharedMemory(const std::vector<std::string>& lanes) {
  for (const std::string& lane : lanes) {
    if (Device(lane) == "memory" && Transport(lane) != "self") return true;
  }
  return false;
}

bool ThroughLoopback(const std::vector<std::string>& lanes) {
  for (const std::string& lane : lanes) {
    if (Device(lane) == "lo") return true;
  }
  return false;
}

std::string SummarizeLanes(const std::map<int, std::vector<std::string>>& lanes_of_peer) {
  std::map<std::string, std::vector<int>> peers_of;
  for (const auto& [peer, lanes] : lanes_of_peer) {
    std::set<std::string> distinct(lanes.begin(), lanes.end());
    std::string key;
    for (const std::string& lane : distinct) key += (key.empty() ? "" : "+") + lane;
    peers_of[key.empty() ? "(none)" : key].push_back(peer);
  }
  std::string out;
  for (const auto& [key, peers] : peers_of) {
    out += (out.empty() ? "" : "; ") + key + (peers.size() == 1 ? " to peer " : " to peers ");
    for (size_t i = 0; i < peers.size(); ++i) out += (i == 0 ? "" : ",") + std::to_string(peers[i]);
  }
  return out;
}

}  // namespace ferry::ucx
