// EPLB's expert arrangement after a rearrangement, read from a file, for the vLLM and SGLang
// layouts.
//
// With EPLB (--enable-eplb) vLLM moves expert weights between EP ranks while it serves: local
// slot i of EP rank r then holds the logical expert physical_to_logical_map[layer][p] for its
// physical expert p (p numbered EP rank after EP rank, as the initial linear placement numbers
// them), not the initial p -> p (p < E), (p - E) mod E arrangement. A refit into such an engine
// must write each slot's current expert, so the layout takes the engine's current map
// ("vllm:...,eplb_map=FILE"): vllm/distributed/eplb/eplb_state.py EplbState.physical_to_logical_map,
// shape (num_moe_layers, num_physical_experts), which rearrange() updates together with the
// weights (rebalance_execute.py rearrange_expert_weights_inplace).
//
// Under pipeline parallelism every PP rank runs its own EplbState over the MoE layers it builds:
// row i of its map is its i-th own MoE layer (vllm/model_executor/models/qwen3_moe.py
// Qwen3MoeForCausalLM: num_moe_layers = len(moe_layers), PPMissingLayer skipped; set_eplb_state
// gives local MoE layer i row i), and its EP group is that stage's ranks only.
//
// An MTP drafter (speculative decoding) is a model of its own in the EplbState of the ranks that
// build it, the last PP rank's: vllm/v1/worker/gpu_model_runner.py load_model calls
// EplbState.add_model for the drafter (DeepSeekMTP, a MixtureOfExperts) beside the target, so it
// has its own EplbModelState whose physical_to_logical_map has one row per drafter MoE layer
// (vllm/model_executor/models/deepseek_mtp.py set_moe_parameters: num_moe_layers =
// num_nextn_predict_layers, moe_layers in MTP layer order), the same physical expert count
// (EplbState.assert_confs_equal) and the same initial arrangement; rearrange() rebalances every
// model's map (vllm/distributed/eplb/eplb_state.py).
//
// The file is JSON or YAML. Without PP: {"physical_to_logical_map": [[...], ...]} (or the bare
// list of rows), e.g. json.dump({"physical_to_logical_map": state.physical_to_logical_map.tolist()},
// f). With pp > 1: {"pp_ranks": [MAP_0, ..., MAP_{pp-1}]}, MAP_s being PP rank s's map in either
// of those two forms. With a drafter, the top level also holds {"drafter": MAP_D}, the drafter's
// EplbModelState map in either form.
//
// SGLang (--enable-eplb, or --init-expert-location) keeps one ExpertLocationMetadata a server,
// the same on all of its ranks (eplb/expert_distribution.py all-reduces the expert counts over
// the server's world before eplb_manager.py rebalances): physical_to_logical_map of shape
// (num_hidden_layers, num_physical_experts), one row per decoder layer, dense ones included
// (models/qwen3_moe.py and deepseek_v2.py get_model_config_for_expert_location: num_layers =
// config.num_hidden_layers), physical experts numbered EP rank after EP rank
// (layers/moe/fused_moe_triton/layer.py _map_global_expert_id_to_local_expert_id). A NextN
// draft's layer lies past the rows and keeps the identity (expert_location.py
// logical_to_all_physical). Each server runs its own EPLB, so the file holds one map per server:
// {"engines": [MAP_0, ..., MAP_{N-1}]}, or, with one server, MAP alone, MAP in either form above
// (json.dump({"physical_to_logical_map": metadata.physical_to_logical_map_cpu.tolist()}, f)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// Rows by MoE layer (in model order), each num_physical entries of logical expert ids.
using EplbMap = std::vector<std::vector<int32_t>>;

// The maps of one engine: the target model's by PP rank and its MTP drafter's.
struct EplbMaps {
  std::vector<EplbMap> pp_ranks;  // the target's, by PP rank
  EplbMap drafter;                // rows by the drafter's MoE layers; empty without a drafter
};

// Reads and checks the maps at `path` for a model whose PP rank s holds `stage_moe_layers[s]`
// MoE layers and whose drafter holds `drafter_moe_layers` (0: no drafter), of `logical` experts
// and `physical` physical experts: one map per PP rank (a file without "pp_ranks" is PP rank 0's,
// allowed with one PP rank only), one row per MoE layer of the rank, `physical` entries a row,
// each in [0, logical), and every logical expert at least once in every row (vLLM keeps a replica
// of each); a "drafter" map exactly when the engine has a drafter with MoE layers, checked alike.
// The file is untrusted: at most kMaxEplbMapFileBytes, sizes checked before anything is sized
// from them; errors name the file, the PP rank or the drafter, the row and the entry.
inline constexpr int64_t kMaxEplbMapFileBytes = int64_t{64} << 20;
Result<EplbMaps> ReadEplbMaps(const std::string& path, const std::vector<int64_t>& stage_moe_layers,
                              int64_t drafter_moe_layers, int64_t logical, int64_t physical);

// Reads and checks SGLang servers' maps at `path`: one a server of `engines` ("engines" holding
// exactly that many, or one map alone with one server), each `layers` rows (the model's decoder
// layers) of `physical` entries in [0, logical), every logical expert in every row (SGLang's
// dispatch maps need a replica of each). Untrusted as ReadEplbMaps; errors name the file, the
// server and the row.
Result<std::vector<EplbMap>> ReadSglangEplbMaps(const std::string& path, int64_t layers,
                                                int64_t engines, int64_t logical,
                                                int64_t physical);

}  // namespace ferry::models
