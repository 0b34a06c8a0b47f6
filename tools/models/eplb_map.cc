// Reading vLLM's and SGLang's EPLB physical-to-logical expert maps: see eplb_map.h.
#include "tools/models/eplb_map.h"

#include <yaml-cpp/yaml.h>

#include "core/base/file_io.h"

namespace ferry::models {
namespace {

// One row: `physical` logical ids in [0, logical), each logical expert present.
Result<std::vector<int32_t>> ReadRow(const YAML::Node& node, int64_t logical, int64_t physical,
                                     const std::string& where) {
  if (!node.IsSequence() || static_cast<int64_t>(node.size()) != physical) {
    return InvalidArgument(where + ": expected a list of " + std::to_string(physical) +
                           " logical expert ids (one per physical expert)");
  }
  std::vector<int32_t> row(static_cast<size_t>(physical));
  std::vector<char> seen(static_cast<size_t>(logical), 0);
  for (int64_t p = 0; p < physical; ++p) {
    int64_t id = -1;
    if (!YAML::convert<int64_t>::decode(node[static_cast<size_t>(p)], id) || id < 0 || id >= logical) {
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
Result<EplbMap> ReadStageMap(const YAML::Node& node, int64_t moe_layers, int64_t logical,
                             int64_t physical, const std::string& where, const std::string& owner,
                             const char* rows_are = "MoE layers") {
  const YAML::Node rows = node.IsMap() ? node["physical_to_logical_map"] : node;
  if (!rows || !rows.IsSequence()) {
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
Result<std::vector<EplbMap>> ReadTargetMaps(const YAML::Node& root,
                                            const std::vector<int64_t>& stage_moe_layers,
                                            int64_t logical, int64_t physical,
                                            const std::string& file) {
  const size_t pp = stage_moe_layers.size();
  std::vector<EplbMap> maps;
  maps.reserve(pp);
  const YAML::Node ranks = root.IsMap() ? root["pp_ranks"] : YAML::Node();
  if (!root.IsMap() || !ranks) {
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
  if (!ranks.IsSequence() || ranks.size() != pp) {
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
Result<EplbMap> ReadDrafterMap(const YAML::Node& root, int64_t drafter_moe_layers, int64_t logical,
                               int64_t physical, const std::string& file) {
  const bool has = root.IsMap() && root["drafter"];
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

// The file at `path`, parsed; `file` becomes the name errors give it.
Result<YAML::Node> LoadMapFile(const std::string& path, std::string& file) {
  FERRY_ASSIGN_OR_RETURN(const std::string text, ReadFileAtMost(path, kMaxEplbMapFileBytes, "EPLB map",
                                                                "kMaxEplbMapFileBytes"));
  file = "EPLB map '" + path + "'";
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ": " + e.what());
  }
}

}  // namespace

Result<EplbMaps> ReadEplbMaps(const std::string& path, const std::vector<int64_t>& stage_moe_layers,
                              int64_t drafter_moe_layers, int64_t logical, int64_t physical) {
  std::string file;
  FERRY_ASSIGN_OR_RETURN(const YAML::Node root, LoadMapFile(path, file));
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
  FERRY_ASSIGN_OR_RETURN(const YAML::Node root, LoadMapFile(path, file));
  std::vector<EplbMap> maps;
  if (!root.IsMap() || !root["engines"]) {
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
  const YAML::Node servers = root["engines"];
  if (!servers.IsSequence() || static_cast<int64_t>(servers.size()) != engines) {
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
