// Reading vLLM's and SGLang's EPLB physical-to-logical expert maps: see eplb_map.h.
#include "tools/models/eplb_map.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include "core/base/file_io.h"

namespace ferry::models {
namespace {

using Json = nlohmann::json;

// The deepest nesting a map file needs: {"pp_ranks": [{"physical_to_logical_map": [[id]]}]}.
constexpr int kMaxDepth = 6;

// One row: `physical` logical ids in [0, logical), each logical expert present.
Result<std::vector<int32_t>> ReadRow(const Json& node, int64_t logical, int64_t physical,
                                     const std::string& where) {
  if (!node.is_array() || static_cast<int64_t>(node.size()) != physical) {
    return InvalidArgument(where + ": expected a list of " + std::to_string(physical) +
                           " logical expert ids (one per physical expert)");
  }
  std::vector<int32_t> row(static_cast<size_t>(physical));
  std::vector<char> seen(static_cast<size_t>(logical), 0);
  for (int64_t p = 0; p < physical; ++p) {
    const Json& v = node[static_cast<size_t>(p)];
    const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() <= INT64_MAX ? v.get<int64_t>()
                       : v.is_number_integer() && !v.is_number_unsigned() ? v.get<int64_t>()
                                                                          : -1;
    if (id < 0 || id >= logical) {
      return InvalidArgument(where + ", physical expert " + std::to_string(p) +
                             ": not a logical expert id in [0, " + std::to_string(logical) + ")");
    }
    row[static_cast<size_t>(p)] = static_cast<int32_t>(id);
    seen[static_cast<size_t>(id)] = 1;
  }
  for (int64_t e = 0; e < logical; ++e) {
    if (!seen[static_cast<size_t>(e)]) {
      return InvalidArgument(where + ": logical expert " + std::to_string(e) +
                             " has no physical replica (the engine keeps at least one of each)");
    }
  }
  return row;
}

// One map, `node` either {"physical_to_logical_map": rows} or the rows: `moe_layers` rows of
// `physical` ids each; `owner` names whose layers they are, `rows_are` what they are (SGLang's
// rows are all decoder layers).
Result<EplbMap> ReadStageMap(const Json& node, int64_t moe_layers, int64_t logical,
                             int64_t physical, const std::string& where, const std::string& owner,
                             const char* rows_are = "MoE layers") {
  static const Json kNone;
  const Json& rows = !node.is_object()                          ? node
                     : node.contains("physical_to_logical_map") ? node["physical_to_logical_map"]
                                                                : kNone;
  if (!rows.is_array()) {
    return InvalidArgument(where +
                           ": expected physical_to_logical_map, a list of rows (one per layer)");
  }
  if (static_cast<int64_t>(rows.size()) != moe_layers) {
    return InvalidArgument(where + " has " + std::to_string(rows.size()) + " rows; " + owner +
                           " has " + std::to_string(moe_layers) + " " + rows_are);
  }
  EplbMap map;
  map.reserve(static_cast<size_t>(moe_layers));
  for (int64_t l = 0; l < moe_layers; ++l) {
    FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> row,
                           ReadRow(rows[static_cast<size_t>(l)], logical, physical,
                                   where + ", row " + std::to_string(l)));
    map.push_back(std::move(row));
  }
  return map;
}

// The target's maps, one per PP rank, from `root` (the file's top level).
Result<std::vector<EplbMap>> ReadTargetMaps(const Json& root,
                                            const std::vector<int64_t>& stage_moe_layers,
                                            int64_t logical, int64_t physical,
                                            const std::string& file) {
  const size_t pp = stage_moe_layers.size();
  std::vector<EplbMap> maps;
  maps.reserve(pp);
  if (!root.is_object() || !root.contains("pp_ranks")) {
    if (pp != 1) {
      return InvalidArgument(file + ": with pp=" + std::to_string(pp) + " it holds one map per " +
                             "PP rank, {\"pp_ranks\": [...]}: each PP rank's EplbState covers " +
                             "only its own MoE layers");
    }
    FERRY_ASSIGN_OR_RETURN(EplbMap map,
                           ReadStageMap(root, stage_moe_layers[0], logical, physical, file, "the model"));
    maps.push_back(std::move(map));
    return maps;
  }
  const Json& ranks = root["pp_ranks"];
  if (!ranks.is_array() || ranks.size() != pp) {
    return InvalidArgument(file + ": pp_ranks must list " + std::to_string(pp) +
                           " maps, one per PP rank");
  }
  for (size_t s = 0; s < pp; ++s) {
    FERRY_ASSIGN_OR_RETURN(EplbMap map,
                           ReadStageMap(ranks[s], stage_moe_layers[s], logical, physical,
                                        file + ", PP rank " + std::to_string(s),
                                        "the rank"));
    maps.push_back(std::move(map));
  }
  return maps;
}

// The drafter's map, the top level's "drafter" (vllm/v1/worker/gpu_model_runner.py registers the
// drafter with EplbState.add_model as a model of its own): present exactly when a drafter has MoE
// layers.
Result<EplbMap> ReadDrafterMap(const Json& root, int64_t drafter_moe_layers, int64_t logical,
                               int64_t physical, const std::string& file) {
  const bool has = root.is_object() && root.contains("drafter");
  if (drafter_moe_layers == 0) {
    if (has) {
      return InvalidArgument(file + " holds a drafter's map, but the engine has no MTP drafter "
                             "with MoE layers (give mtp=N for the engine's drafter)");
    }
    return EplbMap{};
  }
  if (!has) {
    return InvalidArgument(file + " has no \"drafter\" map: the MTP drafter is a model of its own "
                           "in vLLM's EplbState (EplbState.add_model), with its own "
                           "physical_to_logical_map of " + std::to_string(drafter_moe_layers) +
                           " row(s)");
  }
  return ReadStageMap(root["drafter"], drafter_moe_layers, logical, physical, file + ", drafter",
                      "the drafter");
}

// A YAML file's value as JSON: sequences, maps, integers, other scalars as strings; nesting
// deeper than the format's refused (a JSON file is read by nlohmann's parser, which keeps its own
// stack).
Result<Json> FromYaml(const YAML::Node& n, const std::string& file, int depth = 0) {
  if (depth > kMaxDepth) return InvalidArgument(file + ": nested deeper than an EPLB map");
  if (n.IsSequence() || n.IsMap()) {
    Json out = n.IsSequence() ? Json::array() : Json::object();
    for (const auto& item : n) {
      FERRY_ASSIGN_OR_RETURN(Json value, FromYaml(n.IsSequence() ? item : item.second, file,
                                                  depth + 1));
      if (n.IsSequence()) {
        out.push_back(std::move(value));
      } else {
        out[item.first.Scalar()] = std::move(value);
      }
    }
    return out;
  }
  int64_t v = 0;
  if (n.IsScalar() && YAML::convert<int64_t>::decode(n, v)) return Json(v);
  return n.IsScalar() ? Json(n.Scalar()) : Json();
}

// The file at `path`, parsed (JSON, the form the engines' maps are dumped in, by nlohmann's
// parser, which reads megabytes of rows in milliseconds; else YAML); `file` becomes the name
// errors give it.
Result<Json> LoadMapFile(const std::string& path, std::string& file) {
  FERRY_ASSIGN_OR_RETURN(
      const std::string text,
      ReadFileAtMost(path, kMaxEplbMapFileBytes, "EPLB map", "kMaxEplbMapFileBytes"));
  file = "EPLB map '" + path + "'";
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) {
    try {
      return Json::parse(text);
    } catch (const Json::exception& e) {
      return InvalidArgument(file + ": " + e.what());
    }
  }
  try {
    return FromYaml(YAML::Load(text), file);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ": " + e.what());
  }
}

}  // namespace

Result<EplbMaps> ReadEplbMaps(const std::string& path, const std::vector<int64_t>& stage_moe_layers,
                              int64_t drafter_moe_layers, int64_t logical, int64_t physical) {
  std::string file;
  FERRY_ASSIGN_OR_RETURN(const Json root, LoadMapFile(path, file));
  EplbMaps maps;
  FERRY_ASSIGN_OR_RETURN(maps.pp_ranks,
                         ReadTargetMaps(root, stage_moe_layers, logical, physical, file));
  FERRY_ASSIGN_OR_RETURN(maps.drafter,
                         ReadDrafterMap(root, drafter_moe_layers, logical, physical, file));
  return maps;
}

Result<std::vector<EplbMap>> ReadSglangEplbMaps(const std::string& path, int64_t layers,
                                                int64_t engines, int64_t logical,
                                                int64_t physical) {
  std::string file;
  FERRY_ASSIGN_OR_RETURN(const Json root, LoadMapFile(path, file));
  std::vector<EplbMap> maps;
  if (!root.is_object() || !root.contains("engines")) {
    if (engines != 1) {
      return InvalidArgument(file + ": with engines=" + std::to_string(engines) + " it holds one " +
                             "map per server, {\"engines\": [...]}: each SGLang server runs its " +
                             "own EPLB");
    }
    FERRY_ASSIGN_OR_RETURN(EplbMap map,
                           ReadStageMap(root, layers, logical, physical, file, "the model",
                                        "decoder layers"));
    maps.push_back(std::move(map));
    return maps;
  }
  const Json& servers = root["engines"];
  if (!servers.is_array() || static_cast<int64_t>(servers.size()) != engines) {
    return InvalidArgument(file + ": engines must list " + std::to_string(engines) +
                           " maps, one per server");
  }
  for (int64_t k = 0; k < engines; ++k) {
    FERRY_ASSIGN_OR_RETURN(EplbMap map,
                           ReadStageMap(servers[static_cast<size_t>(k)], layers, logical, physical,
                                        file + ", server " + std::to_string(k), "the model",
                                        "decoder layers"));
    maps.push_back(std::move(map));
  }
  return maps;
}

}  // namespace ferry::models
