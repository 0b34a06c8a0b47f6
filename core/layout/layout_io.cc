// Layout and Topology files: YAML (and JSON, which yaml-cpp reads as YAML) to and from the
// in-memory types. yaml-cpp's exceptions are caught here and become Status errors naming the key
// path and line.
#include "core/base/file_io.h"
#include "core/layout/layout_io.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "core/layout/limits.h"

namespace ferry {
namespace {

// ---- Reading helpers: every error names the key path and the line ----

Status Bad(const YAML::Node& node, const std::string& path, const std::string& what) {
  std::string where = path.empty() ? std::string("document") : path;
  if (node.IsDefined() && node.Mark().line >= 0) {
    where += " (line " + std::to_string(node.Mark().line + 1) + ")";
  }
  return InvalidArgument(where + ": " + what);
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

Status CheckMap(const YAML::Node& node, const std::string& path,
                const std::set<std::string>& allowed) {
  if (!node.IsMap()) return Bad(node, path, "expected a mapping");
  for (const auto& kv : node) {
    std::string key = kv.first.Scalar();
    if (!allowed.count(key)) {
      std::string keys;
      for (const std::string& k : allowed) keys += (keys.empty() ? "" : ", ") + k;
      return Bad(kv.first, Join(path, key), "unknown key (expected one of: " + keys + ")");
    }
  }
  return Status::Ok();
}

Result<YAML::Node> Required(const YAML::Node& map, const std::string& path,
                            const std::string& key) {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return Bad(map, path, "missing required key '" + key + "'");
  return n;
}

Result<int64_t> ReadInt(const YAML::Node& n, const std::string& path) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    return Bad(n, path, "expected an integer" + (n.IsScalar() ? ", got '" + n.Scalar() + "'" : ""));
  }
  return v;
}

Result<double> ReadDouble(const YAML::Node& n, const std::string& path) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) {
    return Bad(n, path, "expected a number" + (n.IsScalar() ? ", got '" + n.Scalar() + "'" : ""));
  }
  return v;
}

Result<std::string> ReadString(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar() || n.Scalar().empty()) return Bad(n, path, "expected a non-empty string");
  return n.Scalar();
}

Result<std::vector<int64_t>> ReadInts(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) return Bad(n, path, "expected a list of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < n.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(int64_t v, ReadInt(n[i], Index(path, i)));
    out.push_back(v);
  }
  return out;
}

Result<int> ReadSmallInt(const YAML::Node& n, const std::string& path, int min_value) {
  FERRY_ASSIGN_OR_RETURN(int64_t v, ReadInt(n, path));
  constexpr int64_t kMaxValue = int64_t{1} << 30;
  if (v < min_value || v > kMaxValue) {
    return Bad(n, path, "value " + std::to_string(v) + " is not in [" + std::to_string(min_value) +
                            ", " + std::to_string(kMaxValue) + "]");
  }
  return static_cast<int>(v);
}

// A box is a list of [lo, hi] pairs, one per dim.
Result<Box> ReadBox(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) return Bad(n, path, "expected a box: a list of [lo, hi] pairs, one per dim");
  std::vector<int64_t> lo, hi;
  for (size_t d = 0; d < n.size(); ++d) {
    const std::string p = Index(path, d);
    if (!n[d].IsSequence() || n[d].size() != 2) return Bad(n[d], p, "expected a [lo, hi] pair");
    FERRY_ASSIGN_OR_RETURN(int64_t l, ReadInt(n[d][0], Index(p, 0)));
    FERRY_ASSIGN_OR_RETURN(int64_t h, ReadInt(n[d][1], Index(p, 1)));
    lo.push_back(l);
    hi.push_back(h);
  }
  auto box = Box::Make(lo, hi);
  if (!box.ok()) return Bad(n, path, box.status().message());
  return *box;
}

Result<TensorSpec> ReadTensor(const YAML::Node& n, const std::string& path) {
  FERRY_RETURN_IF_ERROR(CheckMap(n, path, {"name", "shape", "dtype"}));
  TensorSpec t;
  FERRY_ASSIGN_OR_RETURN(YAML::Node name, Required(n, path, "name"));
  FERRY_ASSIGN_OR_RETURN(t.name, ReadString(name, Join(path, "name")));
  FERRY_ASSIGN_OR_RETURN(YAML::Node shape, Required(n, path, "shape"));
  FERRY_ASSIGN_OR_RETURN(t.shape, ReadInts(shape, Join(path, "shape")));
  if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kMaxDims)) {
    return Bad(shape, Join(path, "shape"), "a shape has 1 to 8 dims");
  }
  for (int64_t s : t.shape) {
    if (s <= 0) return Bad(shape, Join(path, "shape"), "extents must be positive");
  }
  FERRY_ASSIGN_OR_RETURN(YAML::Node dtype, Required(n, path, "dtype"));
  FERRY_ASSIGN_OR_RETURN(std::string dname, ReadString(dtype, Join(path, "dtype")));
  auto parsed = ParseDType(dname);
  if (!parsed.ok()) return Bad(dtype, Join(path, "dtype"), parsed.status().message());
  t.dtype = *parsed;
  return t;
}

Result<YAML::Node> ParseDocument(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsDefined() || root.IsNull()) return InvalidArgument("document is empty");
    return root;
  } catch (const YAML::Exception& e) {
    return InvalidArgument("not valid YAML/JSON at line " + std::to_string(e.mark.line + 1) +
                           ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

// The index of the declared tensor that map entry "tensor" at `path` names.
Result<int> ReadTensorRef(const YAML::Node& map, const std::string& path, const Layout& layout) {
  FERRY_ASSIGN_OR_RETURN(YAML::Node tensor_node, Required(map, path, "tensor"));
  FERRY_ASSIGN_OR_RETURN(std::string tensor, ReadString(tensor_node, Join(path, "tensor")));
  const int t = layout.FindTensor(tensor);
  if (t < 0) return Bad(tensor_node, Join(path, "tensor"), "unknown tensor '" + tensor + "'");
  return t;
}

// `transforms`: [{tensor, transform, dtype}], tensors stored transformed (StoredTransform).
Status ReadTransforms(const YAML::Node& transforms, Layout& layout) {
  if (!transforms.IsDefined() || transforms.IsNull()) return Status::Ok();
  if (!transforms.IsSequence()) return Bad(transforms, "transforms", "expected a list");
  for (size_t i = 0; i < transforms.size(); ++i) {
    const std::string path = Index("transforms", i);
    const YAML::Node& n = transforms[i];
    FERRY_RETURN_IF_ERROR(CheckMap(n, path, {"tensor", "transform", "dtype"}));
    FERRY_ASSIGN_OR_RETURN(const int t, ReadTensorRef(n, path, layout));
    FERRY_ASSIGN_OR_RETURN(YAML::Node what_node, Required(n, path, "transform"));
    FERRY_ASSIGN_OR_RETURN(std::string what, ReadString(what_node, Join(path, "transform")));
    FERRY_ASSIGN_OR_RETURN(YAML::Node dtype_node, Required(n, path, "dtype"));
    FERRY_ASSIGN_OR_RETURN(std::string dname, ReadString(dtype_node, Join(path, "dtype")));
    Result<DType> dtype = ParseDType(dname);
    if (!dtype.ok()) return Bad(dtype_node, Join(path, "dtype"), dtype.status().message());
    layout.transforms.push_back({t, what, *dtype});
  }
  return Status::Ok();
}

// `block_scaled`: [{rank, buffer, scales, matrices, rows, cols, scale_fmt}], buffers holding
// block-scaled fp8 (BlockScaledBuffer), both buffers named on `rank`; scale_fmt float32 (the
// default), ue8m0 or ue8m0_packed.
Status ReadBlockScaled(const YAML::Node& list, Layout& layout) {
  if (!list.IsDefined() || list.IsNull()) return Status::Ok();
  if (!list.IsSequence()) return Bad(list, "block_scaled", "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = Index("block_scaled", i);
    const YAML::Node& n = list[i];
    FERRY_RETURN_IF_ERROR(CheckMap(n, path, {"rank", "buffer", "scales", "matrices", "rows", "cols", "scale_fmt"}));
    FERRY_ASSIGN_OR_RETURN(YAML::Node rank_node, Required(n, path, "rank"));
    FERRY_ASSIGN_OR_RETURN(int rank, ReadSmallInt(rank_node, Join(path, "rank"), 0));
    BlockScaledBuffer b;
    for (auto [key, index] : {std::pair<const char*, int*>{"buffer", &b.buffer}, {"scales", &b.scales}}) {
      FERRY_ASSIGN_OR_RETURN(YAML::Node node, Required(n, path, key));
      FERRY_ASSIGN_OR_RETURN(std::string name, ReadString(node, Join(path, key)));
      *index = layout.FindBuffer(rank, name);
      if (*index < 0) return Bad(node, Join(path, key), "no buffer '" + name + "' on rank " + std::to_string(rank));
    }
    for (auto [key, value] : {std::pair<const char*, int64_t*>{"matrices", &b.matrices}, {"rows", &b.rows},
                              {"cols", &b.cols}}) {
      if (!n[key].IsDefined() && std::string(key) == "matrices") continue;  // default 1
      FERRY_ASSIGN_OR_RETURN(YAML::Node node, Required(n, path, key));
      FERRY_ASSIGN_OR_RETURN(*value, ReadInt(node, Join(path, key)));
    }
    if (n["scale_fmt"].IsDefined()) {
      FERRY_ASSIGN_OR_RETURN(std::string fmt, ReadString(n["scale_fmt"], Join(path, "scale_fmt")));
      const std::optional<Fp8ScaleFormat> parsed = ParseFp8ScaleFormat(fmt);
      if (!parsed) {
        return Bad(n["scale_fmt"], Join(path, "scale_fmt"),
                   "expected " + std::string(kFp8ScaleFormatNames) + ", got '" + fmt + "'");
      }
      b.scale_fmt = *parsed;
    }
    layout.block_scaled.push_back(b);
  }
  return Status::Ok();
}

// The optional "format" (must be `format`) and "version" (must be 1) of a layout or topology file.
Status CheckFormatAndVersion(const YAML::Node& root, const std::string& format) {
  if (root["format"].IsDefined()) {
    FERRY_ASSIGN_OR_RETURN(std::string given, ReadString(root["format"], "format"));
    if (given != format) {
      return Bad(root["format"], "format", "expected '" + format + "', got '" + given + "'");
    }
  }
  if (root["version"].IsDefined()) {
    FERRY_ASSIGN_OR_RETURN(int64_t version, ReadInt(root["version"], "version"));
    if (version != 1) {
      return Bad(
          root["version"], "version",
          "unsupported version " + std::to_string(version) + " (this build reads version 1)");
    }
  }
  return Status::Ok();
}

// The "tensors" list, each name once.
Status ReadTensors(const YAML::Node& root, Layout& layout) {
  const YAML::Node tensors = root["tensors"];
  if (!tensors.IsDefined() || !tensors.IsSequence()) {
    return Bad(root, "tensors", "expected a list of tensors");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = Index("tensors", i);
    FERRY_ASSIGN_OR_RETURN(TensorSpec t, ReadTensor(tensors[i], path));
    if (layout.FindTensor(t.name) >= 0) {
      return Bad(tensors[i], path, "tensor '" + t.name + "' is declared twice");
    }
    FERRY_ASSIGN_OR_RETURN(int unused, layout.AddTensor(t));
    (void)unused;
  }
  return Status::Ok();
}

// The optional "buffers" list, added in file order (each (rank, name) once); returns the declared
// sizes, which the caller applies after the fragments.
Result<std::vector<std::pair<int, int64_t>>> ReadBuffers(const YAML::Node& buffers,
                                                         Layout& layout) {
  std::vector<std::pair<int, int64_t>> declared_bytes;
  if (!buffers.IsDefined() || buffers.IsNull()) return declared_bytes;
  if (!buffers.IsSequence()) return Bad(buffers, "buffers", "expected a list of buffers");
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::string path = Index("buffers", i);
    const YAML::Node& b = buffers[i];
    FERRY_RETURN_IF_ERROR(CheckMap(b, path, {"rank", "name", "bytes"}));
    FERRY_ASSIGN_OR_RETURN(YAML::Node rank_node, Required(b, path, "rank"));
    FERRY_ASSIGN_OR_RETURN(int rank, ReadSmallInt(rank_node, Join(path, "rank"), 0));
    FERRY_ASSIGN_OR_RETURN(YAML::Node name_node, Required(b, path, "name"));
    FERRY_ASSIGN_OR_RETURN(std::string name, ReadString(name_node, Join(path, "name")));
    if (layout.FindBuffer(rank, name) >= 0) {
      return Bad(b, path,
                 "buffer '" + name + "' on rank " + std::to_string(rank) + " is declared twice");
    }
    int index = layout.GetOrAddBuffer(rank, name);
    if (b["bytes"].IsDefined()) {
      FERRY_ASSIGN_OR_RETURN(int64_t bytes, ReadInt(b["bytes"], Join(path, "bytes")));
      if (bytes < 0) return Bad(b["bytes"], Join(path, "bytes"), "negative size");
      declared_bytes.emplace_back(index, bytes);
    }
  }
  return declared_bytes;
}

// A fragment's "strides" (elements a step in each dim of `box`), each within kMaxBytes.
Result<std::array<int64_t, kMaxDims>> ReadStrides(const YAML::Node& node, const std::string& path,
                                                  const Box& box) {
  FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> s, ReadInts(node, path));
  if (static_cast<int>(s.size()) != box.ndim) {
    return Bad(node, path,
               std::to_string(s.size()) + " strides for a box of " + std::to_string(box.ndim) +
                   " dims");
  }
  std::array<int64_t, kMaxDims> strides = {};
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] > kMaxBytes) {
      return Bad(node, path,
                 "stride " + std::to_string(s[d]) + " in dim " + std::to_string(d) +
                     " is over the limit of " + std::to_string(kMaxBytes) + " (kMaxBytes)");
    }
    strides[d] = s[d];
  }
  return strides;
}

// One fragment: appended after its buffer's data, or placed at its "byte_offset" with its
// "strides" (row-major by default).
Status ReadFragment(const YAML::Node& f, const std::string& path, Layout& layout) {
  FERRY_RETURN_IF_ERROR(
      CheckMap(f, path, {"tensor", "box", "rank", "buffer", "byte_offset", "strides"}));
  FERRY_ASSIGN_OR_RETURN(const int t, ReadTensorRef(f, path, layout));
  FERRY_ASSIGN_OR_RETURN(YAML::Node box_node, Required(f, path, "box"));
  FERRY_ASSIGN_OR_RETURN(Box box, ReadBox(box_node, Join(path, "box")));
  FERRY_ASSIGN_OR_RETURN(YAML::Node rank_node, Required(f, path, "rank"));
  FERRY_ASSIGN_OR_RETURN(int rank, ReadSmallInt(rank_node, Join(path, "rank"), 0));
  std::string buffer = layout.tensors[static_cast<size_t>(t)].name;
  if (f["buffer"].IsDefined()) {
    FERRY_ASSIGN_OR_RETURN(buffer, ReadString(f["buffer"], Join(path, "buffer")));
  }
  if (!f["byte_offset"].IsDefined()) {
    if (f["strides"].IsDefined()) return Bad(f, path, "'strides' needs an explicit 'byte_offset'");
    layout.AppendFragment(t, box, rank, buffer);
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(int64_t offset, ReadInt(f["byte_offset"], Join(path, "byte_offset")));
  // Named here: past the limit, the buffer size derived from this fragment would be refused
  // later as the buffer's, not as this offset's.
  if (offset > kMaxBytes) {
    return Bad(f["byte_offset"], Join(path, "byte_offset"),
               std::to_string(offset) + " is over the limit of " + std::to_string(kMaxBytes) +
                   " bytes (kMaxBytes)");
  }
  std::array<int64_t, kMaxDims> strides = RowMajorStrides(box.Shape());
  if (f["strides"].IsDefined()) {
    FERRY_ASSIGN_OR_RETURN(strides, ReadStrides(f["strides"], Join(path, "strides"), box));
  }
  layout.PlaceFragment(t, box, rank, buffer, offset, strides);
  return Status::Ok();
}

// The optional "fragments" list.
Status ReadFragments(const YAML::Node& fragments, Layout& layout) {
  if (!fragments.IsDefined() || fragments.IsNull()) return Status::Ok();
  if (!fragments.IsSequence()) return Bad(fragments, "fragments", "expected a list of fragments");
  for (size_t i = 0; i < fragments.size(); ++i) {
    FERRY_RETURN_IF_ERROR(ReadFragment(fragments[i], Index("fragments", i), layout));
  }
  return Status::Ok();
}

// The optional "padding" list: boxes of declared tensors that no fragment holds.
Status ReadPadding(const YAML::Node& padding, Layout& layout) {
  if (!padding.IsDefined() || padding.IsNull()) return Status::Ok();
  if (!padding.IsSequence()) return Bad(padding, "padding", "expected a list of regions");
  for (size_t i = 0; i < padding.size(); ++i) {
    const std::string path = Index("padding", i);
    const YAML::Node& p = padding[i];
    FERRY_RETURN_IF_ERROR(CheckMap(p, path, {"tensor", "box"}));
    FERRY_ASSIGN_OR_RETURN(const int t, ReadTensorRef(p, path, layout));
    FERRY_ASSIGN_OR_RETURN(YAML::Node box_node, Required(p, path, "box"));
    FERRY_ASSIGN_OR_RETURN(Box box, ReadBox(box_node, Join(path, "box")));
    layout.AddPadding(t, box);
  }
  return Status::Ok();
}

Result<Layout> ParseLayoutNode(const YAML::Node& root) {
  FERRY_RETURN_IF_ERROR(
      CheckMap(root, "",
               {"format", "version", "tensors", "buffers", "fragments", "padding", "transforms",
                "block_scaled"}));
  FERRY_RETURN_IF_ERROR(CheckFormatAndVersion(root, "ferry-layout"));
  Layout layout;
  FERRY_RETURN_IF_ERROR(ReadTensors(root, layout));
  // Declared buffers come first, in file order; their sizes are applied after the fragments.
  FERRY_ASSIGN_OR_RETURN(const auto declared_bytes, ReadBuffers(root["buffers"], layout));
  FERRY_RETURN_IF_ERROR(ReadFragments(root["fragments"], layout));
  for (const auto& [index, bytes] : declared_bytes) {
    layout.buffers.SetBytes(static_cast<size_t>(index), bytes);
  }
  FERRY_RETURN_IF_ERROR(ReadPadding(root["padding"], layout));
  FERRY_RETURN_IF_ERROR(ReadTransforms(root["transforms"], layout));
  FERRY_RETURN_IF_ERROR(ReadBlockScaled(root["block_scaled"], layout));
  return layout;
}

Result<Topology> ParseTopologyNode(const YAML::Node& root) {
  FERRY_RETURN_IF_ERROR(CheckMap(root, "",
                                 {"format", "version", "uniform", "ranks", "nic_bandwidth",
                                  "intra_node_bandwidth", "copy_bandwidth", "network_latency"}));
  FERRY_RETURN_IF_ERROR(CheckFormatAndVersion(root, "ferry-topology"));
  Topology topo;
  const bool uniform = root["uniform"].IsDefined();
  const bool listed = root["ranks"].IsDefined();
  if (uniform == listed) {
    return Bad(root, "", "a topology needs exactly one of 'uniform' and 'ranks'");
  }
  if (uniform) {
    const YAML::Node& u = root["uniform"];
    FERRY_RETURN_IF_ERROR(CheckMap(u, "uniform", {"num_ranks", "gpus_per_node"}));
    FERRY_ASSIGN_OR_RETURN(YAML::Node n, Required(u, "uniform", "num_ranks"));
    FERRY_ASSIGN_OR_RETURN(int num_ranks, ReadSmallInt(n, "uniform.num_ranks", 1));
    FERRY_ASSIGN_OR_RETURN(YAML::Node g, Required(u, "uniform", "gpus_per_node"));
    FERRY_ASSIGN_OR_RETURN(int gpus, ReadSmallInt(g, "uniform.gpus_per_node", 1));
    if (num_ranks > kMaxRanks || gpus > kMaxRanks) {
      return Bad(u, "uniform", "num_ranks and gpus_per_node are at most " +
                                   std::to_string(kMaxRanks) + " (kMaxRanks)");
    }
    topo = Topology::Uniform(num_ranks, gpus);
  } else {
    const YAML::Node& ranks = root["ranks"];
    if (!ranks.IsSequence() || ranks.size() == 0) {
      return Bad(ranks, "ranks", "expected a non-empty list, one entry per rank");
    }
    if (ranks.size() > static_cast<size_t>(kMaxRanks)) {
      return Bad(ranks, "ranks", std::to_string(ranks.size()) + " ranks, over the limit of " +
                                     std::to_string(kMaxRanks) + " (kMaxRanks)");
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string path = Index("ranks", i);
      const YAML::Node& r = ranks[i];
      FERRY_RETURN_IF_ERROR(CheckMap(r, path, {"node", "local_device", "nics"}));
      RankPlacement p;
      FERRY_ASSIGN_OR_RETURN(YAML::Node node, Required(r, path, "node"));
      FERRY_ASSIGN_OR_RETURN(p.node, ReadSmallInt(node, Join(path, "node"), 0));
      FERRY_ASSIGN_OR_RETURN(YAML::Node dev, Required(r, path, "local_device"));
      FERRY_ASSIGN_OR_RETURN(p.local_device, ReadSmallInt(dev, Join(path, "local_device"), 0));
      if (p.node >= kMaxRanks || p.local_device >= kMaxRanks) {
        return Bad(r, path, "node and local_device are below " + std::to_string(kMaxRanks) +
                                " (kMaxRanks)");
      }
      if (r["nics"].IsDefined()) {
        FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> nics, ReadInts(r["nics"], Join(path, "nics")));
        for (int64_t nic : nics) {
          if (nic < 0 || nic > (1 << 16)) {
            return Bad(r["nics"], Join(path, "nics"),
                       "NIC index " + std::to_string(nic) + " is not in [0, " +
                           std::to_string(1 << 16) + "]");
          }
          p.nics.push_back(static_cast<int>(nic));
        }
      } else {
        p.nics = {p.local_device};
      }
      topo.ranks.push_back(std::move(p));
    }
  }
  struct Field {
    const char* key;
    double* value;
  };
  for (Field f : {Field{"nic_bandwidth", &topo.nic_bandwidth},
                  Field{"intra_node_bandwidth", &topo.intra_node_bandwidth},
                  Field{"copy_bandwidth", &topo.copy_bandwidth},
                  Field{"network_latency", &topo.network_latency}}) {
    if (!root[f.key].IsDefined()) continue;
    FERRY_ASSIGN_OR_RETURN(double v, ReadDouble(root[f.key], f.key));
    if (!(v > 0)) return Bad(root[f.key], f.key, "must be positive");
    *f.value = v;
  }
  return topo;
}

// ---- Writing helpers ----

// Shortest text that reads back as exactly `v` ("5e-06", "50000000000").
std::string ShortestDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf, end);
}

void EmitInts(YAML::Emitter& out, const int64_t* values, int n) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int i = 0; i < n; ++i) out << values[i];
  out << YAML::EndSeq;
}

void EmitBox(YAML::Emitter& out, const Box& box) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int d = 0; d < box.ndim; ++d) {
    out << YAML::Flow << YAML::BeginSeq << box.lo[d] << box.hi[d] << YAML::EndSeq;
  }
  out << YAML::EndSeq;
}

void EmitTensorRef(YAML::Emitter& out, const Layout& l, int tensor) {
  if (tensor >= 0 && tensor < static_cast<int>(l.tensors.size())) {
    out << l.tensors[tensor].name;
  } else {
    out << tensor;  // an invalid index; reading the file back reports it
  }
}

Result<std::string> ReadFile(const std::string& path) {
  return ReadFileAtMost(path, kMaxInputFileBytes, "layout or topology file", "kMaxInputFileBytes");
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot open '" + path + "' for writing");
  out << text;
  out.close();
  if (!out) return IoError("cannot write '" + path + "'");
  return Status::Ok();
}

}  // namespace

Result<Layout> ParseLayoutYaml(const std::string& text) {
  FERRY_ASSIGN_OR_RETURN(YAML::Node root, ParseDocument(text));
  try {
    return ParseLayoutNode(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("malformed layout at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  }
}

namespace {

// The name of buffer `index`, or the index itself when it is out of range.
std::string BufferNameOr(const Layout& layout, int index) {
  return index >= 0 && index < static_cast<int>(layout.buffers.size())
             ? layout.buffers[static_cast<size_t>(index)].name
             : std::to_string(index);
}

void EmitTensors(YAML::Emitter& out, const Layout& layout) {
  out << YAML::Key << "tensors" << YAML::Value << YAML::BeginSeq;
  for (const TensorSpec& t : layout.tensors) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << t.name;
    out << YAML::Key << "shape" << YAML::Value;
    EmitInts(out, t.shape.data(), static_cast<int>(t.shape.size()));
    out << YAML::Key << "dtype" << YAML::Value << std::string(DTypeName(t.dtype));
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitBuffers(YAML::Emitter& out, const Layout& layout) {
  out << YAML::Key << "buffers" << YAML::Value << YAML::BeginSeq;
  for (const BufferSpec& b : layout.buffers) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "rank" << YAML::Value << b.rank;
    out << YAML::Key << "name" << YAML::Value << b.name;
    out << YAML::Key << "bytes" << YAML::Value << b.bytes;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitFragments(YAML::Emitter& out, const Layout& layout) {
  out << YAML::Key << "fragments" << YAML::Value << YAML::BeginSeq;
  for (const Fragment& f : layout.fragments) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "tensor" << YAML::Value;
    EmitTensorRef(out, layout, f.tensor);
    out << YAML::Key << "box" << YAML::Value;
    EmitBox(out, f.box);
    out << YAML::Key << "rank" << YAML::Value << f.loc.rank;
    out << YAML::Key << "buffer" << YAML::Value;
    if (f.loc.buffer >= 0 && f.loc.buffer < static_cast<int>(layout.buffers.size())) {
      out << layout.buffers[f.loc.buffer].name;
    } else {
      out << f.loc.buffer;
    }
    out << YAML::Key << "byte_offset" << YAML::Value << f.loc.byte_offset;
    out << YAML::Key << "strides" << YAML::Value;
    EmitInts(out, f.loc.strides.data(), f.box.ndim);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitTransforms(YAML::Emitter& out, const Layout& layout) {
  if (layout.transforms.empty()) return;
  out << YAML::Key << "transforms" << YAML::Value << YAML::BeginSeq;
  for (const StoredTransform& t : layout.transforms) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "tensor" << YAML::Value;
    EmitTensorRef(out, layout, t.tensor);
    out << YAML::Key << "transform" << YAML::Value << t.transform;
    out << YAML::Key << "dtype" << YAML::Value << std::string(DTypeName(t.stored_dtype));
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitBlockScaled(YAML::Emitter& out, const Layout& layout) {
  if (layout.block_scaled.empty()) return;
  out << YAML::Key << "block_scaled" << YAML::Value << YAML::BeginSeq;
  for (const BlockScaledBuffer& b : layout.block_scaled) {
    const int rank = b.buffer >= 0 && b.buffer < static_cast<int>(layout.buffers.size())
                         ? layout.buffers[static_cast<size_t>(b.buffer)].rank
                         : -1;
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "rank" << YAML::Value << rank;
    out << YAML::Key << "buffer" << YAML::Value << BufferNameOr(layout, b.buffer);
    out << YAML::Key << "scales" << YAML::Value << BufferNameOr(layout, b.scales);
    out << YAML::Key << "matrices" << YAML::Value << b.matrices;
    out << YAML::Key << "rows" << YAML::Value << b.rows;
    out << YAML::Key << "cols" << YAML::Value << b.cols;
    if (b.scale_fmt != Fp8ScaleFormat::kFloat32) {
      out << YAML::Key << "scale_fmt" << YAML::Value << std::string(Fp8ScaleFormatName(b.scale_fmt));
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitPadding(YAML::Emitter& out, const Layout& layout) {
  if (layout.padding.empty()) return;
  out << YAML::Key << "padding" << YAML::Value << YAML::BeginSeq;
  for (const PaddingRegion& p : layout.padding) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "tensor" << YAML::Value;
    EmitTensorRef(out, layout, p.tensor);
    out << YAML::Key << "box" << YAML::Value;
    EmitBox(out, p.box);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

}  // namespace

std::string LayoutToYaml(const Layout& layout) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << "ferry-layout";
  out << YAML::Key << "version" << YAML::Value << 1;
  EmitTensors(out, layout);
  EmitBuffers(out, layout);
  EmitFragments(out, layout);
  EmitTransforms(out, layout);
  EmitBlockScaled(out, layout);
  EmitPadding(out, layout);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Result<Layout> LoadLayoutFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseLayoutYaml(text).WithContext("layout file '" + path + "'");
}

Status SaveLayoutFile(const Layout& layout, const std::string& path) {
  return WriteFile(path, LayoutToYaml(layout));
}

Result<Topology> ParseTopologyYaml(const std::string& text) {
  FERRY_ASSIGN_OR_RETURN(YAML::Node root, ParseDocument(text));
  try {
    return ParseTopologyNode(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("malformed topology at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  }
}

std::string TopologyToYaml(const Topology& topology) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << "ferry-topology";
  out << YAML::Key << "version" << YAML::Value << 1;
  for (auto [key, value] : {std::pair{"nic_bandwidth", topology.nic_bandwidth},
                            std::pair{"intra_node_bandwidth", topology.intra_node_bandwidth},
                            std::pair{"copy_bandwidth", topology.copy_bandwidth},
                            std::pair{"network_latency", topology.network_latency}}) {
    out << YAML::Key << key << YAML::Value << ShortestDouble(value);
  }
  out << YAML::Key << "ranks" << YAML::Value << YAML::BeginSeq;
  for (const RankPlacement& r : topology.ranks) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "node" << YAML::Value << r.node;
    out << YAML::Key << "local_device" << YAML::Value << r.local_device;
    out << YAML::Key << "nics" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int nic : r.nics) out << nic;
    out << YAML::EndSeq;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Result<Topology> LoadTopologyFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseTopologyYaml(text).WithContext("topology file '" + path + "'");
}

Status SaveTopologyFile(const Topology& topology, const std::string& path) {
  return WriteFile(path, TopologyToYaml(topology));
}

}  // namespace ferry
