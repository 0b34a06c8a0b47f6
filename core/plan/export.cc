// JSON and DOT export of a TransferPlan.
#include "core/plan/export.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ferry {
namespace {

using Json = nlohmann::ordered_json;

Json RegionJson(const Region& r) {
  Json j;
  j["space"] = SpaceName(r.space);
  j["buffer"] = r.buffer;
  j["offset"] = r.offset;
  j["dtype"] = DTypeName(r.dtype);
  j["shape"] = std::vector<int64_t>(r.shape.begin(), r.shape.begin() + r.ndim);
  j["strides"] = std::vector<int64_t>(r.strides.begin(), r.strides.begin() + r.ndim);
  return j;
}

// The buffer table; with the layout it came from, each buffer's name too.
Json BuffersJson(const BufferTable& buffers, const Layout* layout) {
  const bool named = layout != nullptr && layout->buffers.size() == buffers.size();
  Json list = Json::array();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferTable::Entry& b = buffers[i];
    if (named) {
      list.push_back(Json{{"rank", b.rank}, {"name", layout->buffers[i].name}, {"bytes", b.bytes}});
    } else {
      list.push_back(Json{{"rank", b.rank}, {"bytes", b.bytes}});
    }
  }
  return list;
}

}  // namespace

std::string PlanToJson(const TransferPlan& plan, int indent, const Layout* source,
                       const Layout* destination) {
  Json j;
  j["strategy"] = plan.strategy;
  j["num_ranks"] = plan.num_ranks;
  j["source_buffers"] = BuffersJson(plan.source_buffers, source);
  j["destination_buffers"] = BuffersJson(plan.destination_buffers, destination);
  Json slots = Json::array();
  for (const StagingSlot& s : plan.slots) slots.push_back(Json{{"rank", s.rank}, {"bytes", s.bytes}});
  j["slots"] = std::move(slots);
  Json ops = Json::array();
  for (const Op& op : plan.ops) {
    Json o;
    o["id"] = op.id;
    o["kind"] = OpKindName(op.kind);
    o["rank"] = op.rank;
    o["round"] = op.round;
    o["bytes"] = op.bytes;
    if (op.NumDeps() > 0) {
      const std::span<const int> deps = plan.Deps(op);
      o["deps"] = std::vector<int>(deps.begin(), deps.end());
    }
    switch (op.kind) {
      case OpKind::kSend:
      case OpKind::kForward:
      case OpKind::kRecv:
        o["peer"] = op.peer;
        o["message"] = op.message;
        o["link"] = LinkClassName(op.link);
        o["data"] = RegionJson(op.data);
        break;
      default: {
        Json copies = Json::array();
        for (const CopyPair& c : plan.Copies(op)) {
          copies.push_back(Json{{"from", RegionJson(c.from)}, {"to", RegionJson(c.to)}});
        }
        o["copies"] = std::move(copies);
        break;
      }
    }
    ops.push_back(std::move(o));
  }
  j["ops"] = std::move(ops);
  return j.dump(indent);
}

std::string StatsToJson(const PlanStats& s, int indent) {
  Json j;
  j["ops"] = s.ops;
  j["messages"] = s.messages;
  j["network_messages"] = s.network_messages;
  Json links;
  for (LinkClass l : {LinkClass::kSameRank, LinkClass::kSameNode, LinkClass::kNetwork}) {
    links[std::string(LinkClassName(l))] = s.bytes_by_link[static_cast<int>(l)];
  }
  j["bytes_by_link"] = std::move(links);
  j["pack_bytes"] = s.pack_bytes;
  j["unpack_bytes"] = s.unpack_bytes;
  j["staging_bytes"] = s.staging_bytes;
  j["max_rank_network_ingress"] = s.max_rank_ingress;
  j["max_rank_network_egress"] = s.max_rank_egress;
  j["max_node_network_ingress"] = s.max_node_ingress;
  j["max_node_network_egress"] = s.max_node_egress;
  j["node_network_ingress"] = s.node_network_ingress;
  j["node_network_egress"] = s.node_network_egress;
  j["longest_message_chain"] = s.longest_message_chain;
  j["lower_bound_seconds"] = s.lower_bound.seconds;
  j["lower_bound_destination_ingress_seconds"] = s.lower_bound.destination_ingress_seconds;
  j["lower_bound_source_egress_seconds"] = s.lower_bound.source_egress_seconds;
  j["predicted_seconds"] = s.predicted_seconds;
  return j.dump(indent);
}

std::string PlanToDot(const TransferPlan& plan) {
  std::string out = "digraph plan {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n";
  std::vector<std::vector<int>> by_rank(plan.num_ranks);
  for (const Op& op : plan.ops) {
    if (op.rank >= 0 && op.rank < plan.num_ranks) by_rank[op.rank].push_back(op.id);
  }
  for (int r = 0; r < plan.num_ranks; ++r) {
    if (by_rank[r].empty()) continue;
    out += "  subgraph cluster_rank_" + std::to_string(r) + " {\n    label=\"rank " +
           std::to_string(r) + "\";\n";
    for (int id : by_rank[r]) {
      const Op& op = plan.ops[id];
      out += "    op" + std::to_string(id) + " [label=\"" + std::string(OpKindName(op.kind)) + " #" +
             std::to_string(id) + "\\n" + std::to_string(op.bytes) + " B, round " +
             std::to_string(op.round) + "\"];\n";
    }
    out += "  }\n";
  }
  for (const Op& op : plan.ops) {
    for (int dep : plan.Deps(op)) {
      out += "  op" + std::to_string(dep) + " -> op" + std::to_string(op.id) + ";\n";
    }
  }
  for (const auto& [sender, receiver] : plan.MatchedMessages()) {
    out += "  op" + std::to_string(sender) + " -> op" + std::to_string(receiver) +
           " [style=dashed, label=\"" + std::string(LinkClassName(plan.ops[sender].link)) + "\"];\n";
  }
  out += "}\n";
  return out;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return IoError("cannot open '" + path + "' for writing: " + std::strerror(errno));
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  if (!file) return IoError("writing '" + path + "' failed");
  return Status::Ok();
}

}  // namespace ferry
