// How Megatron-Core stores one EP rank's routed experts of a layer, under each of its expert
// modules, and the fragments that say so. A rank holds experts [first, first + count), each
// expert's FFN shard `shard` of `inter` rows (ETP), as:
//  - sequential (SequentialMLP, Megatron-Core's default: moe_grouped_gemm=False): one MLP per local
//    expert, mlp.experts.local_experts.<i>.linear_fc1.weight [2*inter, hidden] = [gate; up] and
//    .linear_fc2.weight [hidden, inter];
//  - grouped (TEGroupedMLP, moe_grouped_gemm=True; Megatron-Bridge's Qwen3-MoE and DeepSeek
//    providers set it): TE GroupedLinear's per-expert parameters mlp.experts.linear_fc1.weight<i>
//    and mlp.experts.linear_fc2.weight<i>, shaped as above;
//  - single_grouped (moe_single_grouped_weight): one mlp.experts.linear_fc1.weight
//    [local experts, 2*inter, hidden] and one linear_fc2.weight [local experts, hidden, inter];
//  - legacy_grouped (GroupedMLP, --moe-use-legacy-grouped-gemm; removed from Megatron-LM in
//    2caa681a1d, still in older releases): mlp.experts.weight1 [hidden, local experts * 2*inter]
//    whose memory is expert after expert of [hidden, 2*inter] (gate columns, then up), i.e. each
//    expert's fc1 transposed, and mlp.experts.weight2, expert after expert of [inter, hidden].
//
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::models {

enum class MegatronExpertStorage { kSequential, kGrouped, kSingleGrouped, kLegacyGrouped };

// "sequential", "grouped", "single_grouped", "legacy_grouped".
const char* ExpertStorageName(MegatronExpertStorage storage);
Result<MegatronExpertStorage> ParseExpertStorage(const std::string& name);

// Tensor ids of gate, up and down: the layer's three expert stacks ([E, ...], one entry) or every
// expert's three tensors (E entries).
using ExpertTensorIds = std::array<int, 3>;

struct ExpertShard {
  int rank = 0;
  int64_t first = 0, count = 0;  // global experts [first, first + count)
  int64_t shard = 0;             // ETP shard index
  int64_t inter = 0, hidden = 0, elem = 0;  // rows of a shard, hidden size, bytes an element
};

// Places the fragments of one rank's experts (`s`) as `storage` keeps them, buffers named after
// `prefix` (e.g. "decoder.layers.3.mlp.experts."). `ids`: ExpertTensorIds, stacks or members.
void PlaceMegatronExperts(Layout& out, MegatronExpertStorage storage, const std::string& prefix,
                          const std::vector<ExpertTensorIds>& ids, const ExpertShard& s);

}  // namespace ferry::models
