// Framework layouts: where Megatron-LM (trainer) and vLLM (inference engine) keep each weight of a
// ModelPreset, as a ferry Layout whose buffers carry the framework's own parameter names.
//
//  megatron:tp=,pp=,ep=,etp=,dp=,cp=   ranks = tp*cp*dp*pp, ordered tp fastest, then cp, dp, pp
//      (Megatron's "tp-cp-ep-dp-pp"); experts use etp fastest, then ep, expert-dp, pp. Fusions:
//      linear_qkv interleaved per query group, linear_fc1 = [gate; up] per TP shard, expert
//      linear_fc1.weight<e>/linear_fc2.weight<e> per local expert (ETP splits the expert FFN),
//      vocab-parallel embedding/output (padded to 128*tp), layers split over pipeline stages
//      (local layer numbers per stage), DP and CP ranks hold replicas. etp defaults to tp (as in
//      Megatron); dp defaults to the smallest value that fits ep*etp.
//  vllm:tp=,dp=,ep=                    ranks = tp*dp, rank = dp_rank*tp + tp_rank. qkv_proj =
//      [q; k; v] per TP shard (KV heads replicated when tp > kv heads), gate_up_proj, MoE
//      w13_weight (stacked [gate; up] per local expert) and w2_weight. MoE layers span all tp*dp
//      ranks as in vLLM: ep of them own experts, each expert's FFN split over tp*dp/ep ranks (ep=1:
//      pure expert tensor parallelism; ep=tp*dp: vLLM's --enable-expert-parallel). Attention and
//      dense weights are replicated over DP. Vocab padded to 64*tp. engines=N repeats the whole
//      engine N times on the next ranks (independent instances, each with every expert).
//  Either framework: expert_tensors=stacks (the default) names each MoE layer's routed experts as
//      one tensor stack per projection, whose fragments span a rank's local experts;
//      expert_tensors=members lists the checkpoint's per-expert tensors (FrameworkSpec::
//      stack_expert_tensors).
//
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "tools/models/presets.h"

namespace ferry::models {

struct MegatronParallel {
  int tp = 1, pp = 1, ep = 1;
  int etp = 0;  // 0: same as tp
  int dp = 0;   // 0: smallest dp with tp*cp*dp a multiple of ep*etp
  int cp = 1;
  // Where a rank keeps its local experts of a layer: false (the default, "experts=stacked"): in
  // one linear_fc1 and one linear_fc2 buffer, local expert after local expert (the contiguous
  // parameter storage of Megatron-Core's grouped experts and DDP buffers, in ascending order);
  // true ("experts=separate"): one buffer per local expert, linear_fc1.weight<i>, as
  // SequentialMLP parameters are allocated one by one.
  bool separate_expert_buffers = false;
};

struct VllmParallel {
  int tp = 1, dp = 1, ep = 1;
  // Independent engine instances, each of tp*dp ranks holding a whole copy of the model (the usual
  // RL rollout fleet: "TP32 x DP8" there means 8 engines of 32 GPUs). Within one engine, dp is
  // vLLM's own data parallelism, whose MoE layers span all of the engine's tp*dp ranks.
  int engines = 1;
};

struct FrameworkSpec {
  enum class Kind { kMegatron, kVllm };
  Kind kind = Kind::kMegatron;
  MegatronParallel megatron;
  VllmParallel vllm;
  // How the layout names a MoE layer's routed experts ("expert_tensors=stacks|members", either
  // framework): true (the default), as one tensor stack per projection,
  // "model.layers.<l>.mlp.experts.[0:E].gate_proj.weight" of shape [E, ...] (core/layout/
  // tensor_stack.h), the way both frameworks store them; false, as the checkpoint's E tensors
  // "model.layers.<l>.mlp.experts.<e>.gate_proj.weight". The bytes and buffers are the same either
  // way; layouts that name experts alike plan fastest (docs/planner.md).
  bool stack_expert_tensors = true;

  // Canonical text, e.g. "megatron:tp=2,pp=4,ep=16,etp=2,dp=16,cp=1" or
  // "vllm:tp=8,dp=2,ep=16" (",engines=N" when N > 1, ",expert_tensors=members" when not stacked).
  std::string ToString() const;
};

// Parses "megatron:tp=2,pp=4,ep=16" or "vllm:tp=8,dp=2,ep=16". Unknown keys, repeated keys,
// non-positive or non-numeric values are errors.
Result<FrameworkSpec> ParseFrameworkSpec(const std::string& text);

// Fills the defaults (Megatron etp and dp) for `model` and checks every divisibility the framework
// needs (heads, KV groups, FFN sizes, experts, Mamba heads and groups, layers vs pipeline stages).
Result<FrameworkSpec> ResolveFrameworkSpec(const FrameworkSpec& spec, const ModelConfig& model);

// Number of ranks of a resolved spec.
int NumRanks(const FrameworkSpec& resolved);

// The layout of `preset` under `spec` (resolved first) on ranks first_rank .. first_rank+n-1.
Result<Layout> BuildFrameworkLayout(const ModelPreset& preset, const FrameworkSpec& spec,
                                    int first_rank = 0);

struct RefitOptions {
  bool colocated = false;  // destination on the source's ranks (0..), not after them
  int gpus_per_node = 8;
};

// Source and destination layouts of one refit plus the topology of all their ranks.
struct RefitLayouts {
  FrameworkSpec source_spec;       // resolved
  FrameworkSpec destination_spec;  // resolved
  int destination_first_rank = 0;
  Layout source;
  Layout destination;
  Topology topology;
};

// Source on ranks 0..M-1; destination on M..M+N-1, or on 0..N-1 when colocated. The topology
// spans max(M+N, ...) ranks (all ranks either side uses), gpus_per_node per node.
Result<RefitLayouts> BuildRefitLayouts(const ModelPreset& preset, const FrameworkSpec& source,
                                       const FrameworkSpec& destination,
                                       const RefitOptions& options = {});

}  // namespace ferry::models
