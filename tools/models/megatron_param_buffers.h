// Megatron's DDP contiguous parameter buffers as a storage option of the Megatron layout: with the
// distributed optimizer, DistributedDataParallel backs every parameter of a model chunk by a view
// of one param_data buffer per (dtype, expert-parallel) group, so a refit can read the weights
// straight from those buffers. This file orders a rank's parameters as the chunk's
// named_parameters() does and moves each parameter's fragments into its group's buffer at the
// offset the distributed optimizer gives it (tools/models/distributed_optimizer_buffer.h).
//
// GPT models (megatron/core/models/gpt/gpt_model.py) and hybrid Mamba models
// (megatron/core/models/hybrid/hybrid_model.py) alike.
//
// Follows megatron/core/distributed/distributed_data_parallel.py (trainable params in
// named_parameters() order, grouped by group_params_for_buffers in
// megatron/core/distributed/param_and_grad_buffer.py; buffers and expert_parallel_buffers; no
// bucketing past pipeline rank 0 or the first model chunk) and megatron/training/training.py
// resolve_ddp_bucket_size (one bucket without --overlap-grad-reduce, its default; with it
// max(40M, 1M * dp) elements).
//
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry::models {

struct MegatronBufferGroups {
  int first_rank = 0;
  int num_ranks = 0;
  int stage_size = 1;               // ranks of one pipeline stage (tp*cp*dp)
  int dp_cp = 1;                    // the dense buffers' data-parallel group (dp*cp)
  int expert_dp = 1;                // the expert buffers' data-parallel group
  bool experts_separate = false;    // ep > 1 or etp != tp: experts in expert_parallel_buffers
  // megatron/core/models/common/language_module/language_module.py
  // setup_embeddings_and_output_layer marks shared_embedding, over several pipeline stages, on the
  // embedding with tied embeddings or MTP layers (the MTP stage keeps its own copy), and on the
  // output layer with tied embeddings.
  bool shared_embedding = false;
  bool shared_output_layer = false;
  bool overlap_grad_reduce = false;  // --overlap-grad-reduce: buckets on pipeline rank 0
  // Megatron-Core before 0.19: the Mamba mixer's conv1d is a child module registered after
  // in_proj, so its parameters follow in_proj's instead of leading the mixer's.
  bool mamba_conv1d_module = false;
};

// The sort key of Megatron parameter `name` (a buffer name of the Megatron layout, after its
// "model<v>." chunk prefix) in named_parameters() order, or NotFound when it is no parameter
// (the router's expert_bias buffer), InvalidArgument when its module order is not modelled.
// `mamba_conv1d_module`: the Mamba mixer order of Megatron-Core before 0.19
// (MegatronBufferGroups::mamba_conv1d_module).
struct ParamOrderKey {
  int section = 0;  // embedding, decoder layers, final norm, MTP layers, output layer
  int64_t layer = 0, item = 0, sub = 0;
  bool expert = false;  // a routed expert's parameter (not part of the order)
  bool operator<(const ParamOrderKey& o) const;
};
Result<ParamOrderKey> MegatronParamOrder(const std::string& name, bool mamba_conv1d_module = false);

// Moves the parameters of ranks [first_rank, first_rank + num_ranks) of `layout` into their
// chunk's contiguous buffers, named "[model<v>.]buffers.<k>.param_data" and
// "[model<v>.]expert_parallel_buffers.<k>.param_data" (k counting groups in named_parameters()
// order); buffers that hold no parameter stay as they are.
Result<Layout> PackMegatronParamBuffers(const Layout& layout, const MegatronBufferGroups& groups);

}  // namespace ferry::models
