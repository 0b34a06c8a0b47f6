// The inference engines' shared module storage (internal to tools/models): vLLM and SGLang build
// their attention and MoE layers from the same layer classes (SGLang's srt/layers/linear.py and
// fused_moe_triton/layer.py descend from vLLM's), so both layout writers place a fused qkv_proj,
// DeepSeek's MLA projections and a FusedMoE layer's w13_weight / w2_weight through EngineWriter.
// What differs between the engines is which ranks form each group, which the callers pass in.
//
// Not thread-safe: one writer appends to one layout.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/layout_writer.h"
#include "tools/models/presets.h"

namespace ferry::models {

class EngineWriter : public LayoutWriter {
 public:
  // `experts_module`: the module under a layer's prefix that owns w13_weight and w2_weight
  // ("mlp.experts." in SGLang's FusedMoE, "mlp.experts.routed_experts." in vLLM 0.33's MoERunner).
  EngineWriter(const ModelPreset& preset, bool stack_experts, Layout& out,
               std::string experts_module)
      : LayoutWriter(preset, stack_experts, out), experts_module_(std::move(experts_module)) {}

 protected:
  // qkv_proj per rank of `group` (its TP group): [q heads of the rank; its KV heads (k); the same
  // (v)]. With more ranks than KV heads, each KV head is replicated on group / kv consecutive
  // ranks (QKVParallelLinear, num_kv_head_replicas = tp / kv). Then o_proj row-parallel and, with
  // q/k norms, the norms replicated. `module` is the checkpoint's ("self_attn." or "mixer.").
  Status GqaAttention(int64_t l, const std::string& p, const std::string& module,
                      const std::vector<int>& group);

  // DeepSeek's MLA over `group`: `fused_a` (the engine's name for [q_a_proj;
  // kv_a_proj_with_mqa], replicated, with a q LoRA), q_b_proj (q_proj without one) and kv_b_proj
  // column-parallel over heads, o_proj row-parallel, the norms replicated.
  Status MlaAttention(int64_t l, const std::string& p, const std::vector<int>& group,
                      const std::string& fused_a);

  struct ExpertGeometry {
    int64_t inter, hidden, elem;  // inter: a shard's FFN rows
  };
  using ExpertIds = std::array<int, 3>;  // gate, up, down (LayoutWriter::AddExpertTensors)

  // A run of a rank's local experts: logical experts first, first + step, ... (count of them),
  // FFN shard `shard`, at local expert slots local, local + 1, ... of the rank's `slots`.
  struct ExpertRun {
    int rank = 0;
    int64_t shard = 0, first = 0, count = 0, step = 1, local = 0, slots = 0;
  };

  // One run into its rank's w13_weight ([slots, 2 * inter, hidden], [gate shard; up shard] per
  // expert) and w2_weight ([slots, hidden, inter]), local expert after local expert. As stacks,
  // consecutive experts (step 1) are one fragment a projection, others one a projection and expert.
  void PlaceRankExperts(const std::string& p, const std::vector<ExpertIds>& ids,
                        const ExpertGeometry& g, const ExpertRun& r);

  // Physical experts [start, start + count) of a layer into `rank`'s local slots 0.. of `slots`,
  // each the logical expert `arranged` names (an EPLB map's row), else the initial arrangement:
  // physical p holds logical p below E, then (p - E) mod E (a redundant expert replicates the
  // logical expert of its number modulo E in both engines: vllm/distributed/eplb/eplb_state.py
  // build_initial_global_physical_to_logical_map, sglang srt/eplb/expert_location.py init_trivial).
  void PlacePhysicalExperts(const std::string& p, const std::vector<ExpertIds>& ids,
                            const ExpertGeometry& g, int rank, int64_t shard, int64_t start,
                            int64_t count, int64_t slots, const std::vector<int32_t>* arranged);

  std::map<int, MatrixStack> fp8_experts_;  // expert buffers' matrices, for quant=fp8_block

 private:
  std::string experts_module_;

  // The q/k/v `param` ("weight" or "bias") of layer l fused into `buffer` on each rank of `group`.
  Status FusedQkv(int64_t l, const std::string& module, const std::string& param,
                  const std::vector<int>& group, const std::string& buffer);
};

}  // namespace ferry::models
