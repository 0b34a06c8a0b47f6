// JSON and DOT export of a TransferPlan. Plans are written to a stream as they are read, so that
// exporting a plan of millions of ops and copy pairs takes no memory beyond the plan's (a JSON DOM
// of DeepSeek-V3's 11.5M-pair plan did not fit in 24 GiB); stats, small, go through a DOM.
#include "core/plan/export.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan/staging_layout.h"

namespace ferry {
namespace {

using Json = nlohmann::ordered_json;

// Writes JSON text to a stream as it goes, in nlohmann::json's dump() format (compact for
// indent < 0; else one member or element per line, `indent` spaces a level, "key": value), so
// that streamed and DOM-built text are byte-identical. Callers pair Begin/End calls; the writer
// only tracks where commas and line breaks go. Text collects in a buffer that goes to the stream
// whenever it passes 1 MiB and on Finish().
class JsonStreamWriter {
 public:
  JsonStreamWriter(std::ostream& out, int indent) : out_(out), indent_(indent) {
    buffer_.reserve(kFlushBytes + 4096);
  }

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  // The next value's key, inside an object.
  void Key(std::string_view key) {
    Separate();
    String(key);
    buffer_.append(indent_ >= 0 ? ": " : ":");
    after_key_ = true;
  }
  void Int(int64_t value) {
    Separate();
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
    buffer_.append(digits, end);
  }
  void Str(std::string_view value) {
    Separate();
    String(value);
  }
  // Key(key) then the value.
  void Member(std::string_view key, int64_t value) {
    Key(key);
    Int(value);
  }
  void Member(std::string_view key, std::string_view value) {
    Key(key);
    Str(value);
  }
  void IntArray(std::span<const int64_t> values) {
    BeginArray();
    for (int64_t v : values) Int(v);
    EndArray();
  }
  // Writes what is buffered to the stream.
  void Finish() {
    out_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    buffer_.clear();
  }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  struct Level {
    bool empty = true;
  };
  void Open(char bracket) {
    Separate();
    buffer_.push_back(bracket);
    levels_.push_back({});
  }
  void Close(char bracket) {
    const bool empty = levels_.back().empty;
    levels_.pop_back();
    if (!empty && indent_ >= 0) {
      buffer_.push_back('\n');
      Pad(levels_.size());
    }
    buffer_.push_back(bracket);
    if (buffer_.size() >= kFlushBytes) Finish();
  }
  // Before a key, or a value that has no key: the comma and line break of its place.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (levels_.empty()) return;
    Level& level = levels_.back();
    if (!level.empty) buffer_.push_back(',');
    level.empty = false;
    if (indent_ >= 0) {
      buffer_.push_back('\n');
      Pad(levels_.size());
    }
  }
  void Pad(size_t depth) { buffer_.append(depth * static_cast<size_t>(indent_), ' '); }
  // A JSON string: quotes, backslashes and control characters escaped as nlohmann::json does;
  // other bytes (UTF-8 included) as they are.
  void String(std::string_view text) {
    buffer_.push_back('"');
    for (const char c : text) {
      switch (c) {
        case '"': buffer_.append("\\\""); break;
        case '\\': buffer_.append("\\\\"); break;
        case '\b': buffer_.append("\\b"); break;
        case '\f': buffer_.append("\\f"); break;
        case '\n': buffer_.append("\\n"); break;
        case '\r': buffer_.append("\\r"); break;
        case '\t': buffer_.append("\\t"); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x",
                          static_cast<unsigned>(static_cast<unsigned char>(c)));
            buffer_.append(escaped);
          } else {
            buffer_.push_back(c);
          }
      }
    }
    buffer_.push_back('"');
  }

  std::ostream& out_;
  const int indent_;
  std::string buffer_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

void WriteRegion(JsonStreamWriter& w, const Region& r) {
  const int ndim = std::clamp(r.ndim, 0, kMaxDims);
  w.BeginObject();
  w.Member("space", SpaceName(r.space));
  w.Member("buffer", r.buffer);
  w.Member("offset", r.offset);
  w.Member("dtype", DTypeName(r.dtype));
  w.Key("shape");
  w.IntArray({r.shape.data(), static_cast<size_t>(ndim)});
  w.Key("strides");
  w.IntArray({r.strides.data(), static_cast<size_t>(ndim)});
  w.EndObject();
}

// The buffer table; with the layout it came from, each buffer's name too.
void WriteBuffers(JsonStreamWriter& w, const BufferTable& buffers, const Layout* layout) {
  const bool named = layout != nullptr && layout->buffers.size() == buffers.size();
  w.BeginArray();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferTable::Entry& b = buffers[i];
    w.BeginObject();
    w.Member("rank", b.rank);
    if (named) {
      w.Member("name", layout->buffers[i].name);
    }
    w.Member("bytes", b.bytes);
    w.EndObject();
  }
  w.EndArray();
}

// Writes the file at `path` (replacing it) through `write`, with a 1 MiB stream buffer.
Status WriteFile(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::vector<char> buffer(size_t{1} << 20);  // outlives `file`, which uses it
  std::ofstream file;
  file.rdbuf()->pubsetbuf(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  file.open(path, std::ios::binary | std::ios::trunc);
  if (!file) return IoError("cannot open '" + path + "' for writing: " + std::strerror(errno));
  write(file);
  file.close();
  if (!file) return IoError("writing '" + path + "' failed");
  return Status::Ok();
}

}  // namespace

void WritePlanJson(std::ostream& out, const TransferPlan& plan, int indent, const Layout* source,
                   const Layout* destination, std::optional<int64_t> staging_needed) {
  JsonStreamWriter w(out, indent);
  w.BeginObject();
  w.Member("strategy", plan.strategy);
  w.Member("num_ranks", plan.num_ranks);
  if (!staging_needed) {
    if (Result<int64_t> needed = PlanOrderStagingBytes(plan); needed.ok()) staging_needed = *needed;
  }
  if (staging_needed) w.Member("staging_needed", *staging_needed);
  w.Key("source_buffers");
  WriteBuffers(w, plan.source_buffers, source);
  w.Key("destination_buffers");
  WriteBuffers(w, plan.destination_buffers, destination);
  w.Key("slots");
  w.BeginArray();
  for (const StagingSlot& s : plan.slots) {
    w.BeginObject();
    w.Member("rank", s.rank);
    w.Member("bytes", s.bytes);
    w.EndObject();
  }
  w.EndArray();
  w.Key("ops");
  w.BeginArray();
  for (const Op& op : plan.ops) {
    w.BeginObject();
    w.Member("id", op.id);
    w.Member("kind", OpKindName(op.kind));
    w.Member("rank", op.rank);
    w.Member("round", op.round);
    w.Member("bytes", op.bytes);
    if (op.NumDeps() > 0) {
      w.Key("deps");
      w.BeginArray();
      for (int dep : plan.Deps(op)) w.Int(dep);
      w.EndArray();
    }
    switch (op.kind) {
      case OpKind::kSend:
      case OpKind::kForward:
      case OpKind::kRecv:
        w.Member("peer", op.peer);
        w.Member("message", op.message);
        w.Member("link", LinkClassName(op.link));
        w.Key("data");
        WriteRegion(w, op.Data());
        break;
      case OpKind::kQuantize:
        if (op.NumCopies() > 0) {
          w.Key("scales");
          WriteRegion(w, QuantizeScales(op, plan.Copy(op.copies_begin).from));
        }
        if (op.scale_fmt != Fp8ScaleFormat::kFloat32) w.Member("scale_fmt", Fp8ScaleFormatName(op.scale_fmt));
        [[fallthrough]];
      default:
        w.Key("copies");
        w.BeginArray();
        for (const CopyPair& c : plan.Copies(op)) {
          w.BeginObject();
          w.Key("from");
          WriteRegion(w, c.from);
          w.Key("to");
          WriteRegion(w, c.to);
          if (c.fn != ElementFn::kNone) w.Member("fn", ElementFnName(c.fn));
          w.EndObject();
        }
        w.EndArray();
        break;
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Finish();
}

std::string PlanToJson(const TransferPlan& plan, int indent, const Layout* source,
                       const Layout* destination) {
  std::ostringstream out;
  WritePlanJson(out, plan, indent, source, destination);
  return std::move(out).str();
}

Status WritePlanJsonFile(const std::string& path, const TransferPlan& plan, int indent,
                         const Layout* source, const Layout* destination,
                         std::optional<int64_t> staging_needed) {
  return WriteFile(path, [&](std::ostream& out) {
    WritePlanJson(out, plan, indent, source, destination, staging_needed);
  });
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

void WritePlanDot(std::ostream& out, const TransferPlan& plan) {
  out << "digraph plan {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n";
  std::vector<std::vector<int>> by_rank(plan.num_ranks);
  for (const Op& op : plan.ops) {
    if (op.rank >= 0 && op.rank < plan.num_ranks) by_rank[op.rank].push_back(op.id);
  }
  for (int r = 0; r < plan.num_ranks; ++r) {
    if (by_rank[r].empty()) continue;
    out << "  subgraph cluster_rank_" << r << " {\n    label=\"rank " << r << "\";\n";
    for (int id : by_rank[r]) {
      const Op& op = plan.ops[id];
      out << "    op" << id << " [label=\"" << OpKindName(op.kind) << " #" << id << "\\n" << op.bytes
          << " B, round " << op.round << "\"];\n";
    }
    out << "  }\n";
  }
  for (const Op& op : plan.ops) {
    for (int dep : plan.Deps(op)) out << "  op" << dep << " -> op" << op.id << ";\n";
  }
  for (const auto& [sender, receiver] : plan.MatchedMessages()) {
    out << "  op" << sender << " -> op" << receiver << " [style=dashed, label=\""
        << LinkClassName(plan.ops[sender].link) << "\"];\n";
  }
  out << "}\n";
}

std::string PlanToDot(const TransferPlan& plan) {
  std::ostringstream out;
  WritePlanDot(out, plan);
  return std::move(out).str();
}

Status WritePlanDotFile(const std::string& path, const TransferPlan& plan) {
  return WriteFile(path, [&](std::ostream& out) { WritePlanDot(out, plan); });
}

}  // namespace ferry
