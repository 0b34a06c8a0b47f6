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
// The file is JSON or YAML: {"physical_to_logical_map": [[...], ...]} (or the bare list of rows),
// e.g. json.dump({"physical_to_logical_map": state.physical_to_logical_map.tolist()}, f).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

// Rows by MoE layer (in model order), each num_physical entries of logical expert ids.
using EplbMap = std::vector<std::vector<int32_t>>;

// Reads and checks the map at `path` for a model of `moe_layers` MoE layers, `logical` experts
// and `physical` physical experts: one row per MoE layer, `physical` entries a row, each in
// [0, logical), and every logical expert at least once in every row (vLLM keeps a replica of each).
// The file is untrusted: at most kMaxEplbMapFileBytes, sizes checked before anything is sized
// from them; errors name the file, the row and the entry.
inline constexpr int64_t kMaxEplbMapFileBytes = int64_t{64} << 20;
Result<EplbMap> ReadEplbMap(const std::string& path, int64_t moe_layers, int64_t logical,
                            int64_t physical);

}  // namespace ferry::models
