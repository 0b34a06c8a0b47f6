// Builders: make fragments from the words users already speak.
//  * a device mesh with DTensor-style placements (Shard(d), Replicate(), uneven splits);
//  * Megatron-style helpers (column/row/vocab parallel, expert parallel, pipeline stages, FSDP flat
//    sharding of a concatenated parameter buffer);
//  * fused parameters (a buffer that concatenates pieces of several logical tensors, as vLLM's
//    qkv_proj / gate_up_proj / MoE w13) and Megatron's QKV interleaved per query group (GQA).
// All builders append to a Layout and return a Status; none allocates memory for data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"

namespace ferry {

// ---- Splitting a dimension ----

// torch.chunk rule: chunks of ceil(n / parts) elements; trailing chunks may be smaller or empty.
std::vector<int64_t> ChunkSizes(int64_t n, int parts);
// Even split: fails unless parts divides n.
Result<std::vector<int64_t>> EvenSizes(int64_t n, int parts);

// ---- Device mesh and placements (DTensor semantics) ----

struct Placement {
  enum class Kind { kShard, kReplicate };
  Kind kind = Kind::kReplicate;
  int dim = 0;                 // tensor dim for kShard
  std::vector<int64_t> sizes;  // explicit uneven split along `dim` (sum == extent); empty = chunk rule
};
Placement Shard(int dim);
Placement ShardUneven(int dim, std::vector<int64_t> sizes);
Placement Replicate();

struct DeviceMesh {
  std::vector<int64_t> shape;  // mesh dims, e.g. {dp, tp}
  std::vector<int> ranks;      // row-major over `shape`; size == product(shape); any rank numbers
  static DeviceMesh Make(std::vector<int64_t> shape, std::vector<int> ranks);
  // Ranks 0..product(shape)-1 offset by `first_rank`.
  static DeviceMesh Iota(std::vector<int64_t> shape, int first_rank = 0);
};

// The box each mesh rank holds: one entry per mesh rank, in mesh order, empty boxes included.
// Several mesh dims sharding the same tensor dim nest left to right (mesh dim 0 splits first, the
// next splits each of its shards by the chunk rule), as DTensor does. Explicit sizes split the
// region the earlier mesh dims left, so they must sum to its extent for every parent shard.
// O(mesh size * mesh dims).
Result<std::vector<std::pair<int, Box>>> MeshBoxes(const TensorSpec& tensor, const DeviceMesh& mesh,
                                                   const std::vector<Placement>& placements);
// Adds `tensor` and one fragment per mesh rank (empty shards skipped), each contiguous at the end of
// buffer `buffer_name` (default: the tensor's name) on its rank.
Status AddMeshSharded(Layout& layout, const TensorSpec& tensor, const DeviceMesh& mesh,
                      const std::vector<Placement>& placements, const std::string& buffer_name = "");

// ---- Megatron-style helpers (1-D tensor-parallel groups) ----

// Column parallel: dim 0 split evenly over `tp_ranks`. Row parallel: dim 1. Both fail on uneven.
Status AddColumnParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                         const std::string& buffer_name = "");
Status AddRowParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                      const std::string& buffer_name = "");
// Vocab parallel: dim 0 padded up to a multiple of `pad_multiple * tp`, split evenly; the padded
// rows beyond the tensor are not fragments (each rank's buffer still has room for them, so a rank
// whose rows are all padding gets a buffer and no fragment).
Status AddVocabParallel(Layout& layout, const TensorSpec& tensor, const std::vector<int>& tp_ranks,
                        int64_t pad_multiple, const std::string& buffer_name = "");
// Replicated on every rank listed (norms, biases, DP/CP replicas).
Status AddReplicated(Layout& layout, const TensorSpec& tensor, const std::vector<int>& ranks,
                     const std::string& buffer_name = "");

// Pipeline stage of each of `num_layers` layers over `pp` stages: as even as possible, earlier
// stages take the remainder. Fails if pp > num_layers or pp < 1.
Result<std::vector<int>> PipelineStages(int num_layers, int pp);
// Expert parallel: EP rank owning each of `num_experts` experts (contiguous blocks). Fails unless
// ep divides num_experts.
Result<std::vector<int>> ExpertOwners(int num_experts, int ep);

// ---- FSDP flat sharding ----

// The boxes a flat element range [begin, end) of a row-major tensor of `shape` covers: at most
// 2*ndim-1 boxes, in flat order.
std::vector<Box> FlatRangeToBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end);
// Concatenates `tensors` (flattened, in order; all of one dtype) into one flat buffer padded to a
// multiple of ranks.size() * align_elements, and gives rank i the i-th equal chunk in buffer
// `buffer_name` (appended after any data the buffer already holds on that rank). Fragments keep the
// full tensor's row-major strides, at their offsets within the chunk; each tensor piece becomes at
// most 2*ndim-1 fragments. O(tensors + ranks + fragments).
Status AddFsdpFlatSharded(Layout& layout, const std::vector<TensorSpec>& tensors,
                          const std::vector<int>& ranks, const std::string& buffer_name,
                          int64_t align_elements = 1);

// ---- Fused parameters ----

struct FusedPiece {
  TensorSpec tensor;  // logical tensor (added to the layout if new)
  Box box;            // region of it that goes into the fused buffer
};
// A buffer on `rank` that concatenates `pieces` along `concat_dim` (all pieces share the other
// extents). Each piece becomes a fragment with the fused buffer's strides. vLLM's qkv_proj is
// {q shard, k shard, v shard} along dim 0; MoE w13 for one expert is {gate, up} along dim 0.
// `base_offset` (in bytes) places the fused block inside a larger buffer (stacked experts); the
// buffer grows to cover the block. All pieces share one dtype and number of dims; each box must lie
// inside its tensor. Fails without changing `layout`.
Status AddFusedConcat(Layout& layout, int rank, const std::string& buffer_name,
                      const std::vector<FusedPiece>& pieces, int concat_dim,
                      int64_t base_offset = 0);

// Megatron's linear_qkv: per query group g, rows [q heads of g | k head g | v head g] (each head
// `head_dim` rows of `hidden` columns); groups split evenly over tp_ranks. q, k, v are the logical
// tensors [num_heads*head_dim, hidden], [num_groups*head_dim, hidden] (x2); any trailing dims are
// allowed as long as q, k and v share them (a 1-D bias works too). Each rank's block is appended
// after any data its buffer already holds; 3 fragments per query group. Fails without changing
// `layout` (names that exist with another shape or dtype are rejected up front).
Status AddMegatronQkvInterleaved(Layout& layout, const TensorSpec& q, const TensorSpec& k,
                                 const TensorSpec& v, int num_heads, int num_groups,
                                 int64_t head_dim, const std::vector<int>& tp_ranks,
                                 const std::string& buffer_name);

}  // namespace ferry
