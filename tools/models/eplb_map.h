// vLLM EPLB's expert arrangement after a rearrangement, read from a file, for the vLLM layout.
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
// The file is JSON or YAML. Without PP: {"physical_to_logical_map": [[...], ...]} (or the bare
// list of rows), e.g. json.dump({"physical_to_logical_map": state.physical_to_logical_map.tolist()},
// f). With pp > 1: {"pp_ranks": [MAP_0, ..., MAP_{pp-1}]}, MAP_s being PP rank s's map in either
// of those two forms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// Rows by MoE layer (in model order), each num_physical entries of logical expert ids.
using EplbMap = std::vector<std::vector<int32_t>>;

// Reads and checks the maps at `path` for a model whose PP rank s holds `stage_moe_layers[s]`
// MoE layers, of `logical` experts and `physical` physical experts: one map per PP rank (a file
// without "pp_ranks" is PP rank 0's, allowed with one PP rank only), one row per MoE layer of the
// rank, `physical` entries a row, each in [0, logical), and every logical expert at least once in
// every row (vLLM keeps a replica of each). The file is untrusted: at most kMaxEplbMapFileBytes,
// sizes checked before anything is sized from them; errors name the file, the PP rank, the row
// and the entry.
inline constexpr int64_t kMaxEplbMapFileBytes = int64_t{64} << 20;
Result<std::vector<EplbMap>> ReadEplbMaps(const std::string& path,
                                          const std::vector<int64_t>& stage_moe_layers,
                                          int64_t logical, int64_t physical);

}  // namespace ferry::models
