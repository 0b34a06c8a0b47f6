// Where Megatron's distributed optimizer puts each parameter in a DDP contiguous buffer: the
// parameters in reverse (backprop) order, each start aligned to 64 elements, buckets of about
// `bucket_size` elements whose ends are padded to a multiple of lcm(dp, 128), and a parameter
// marked shared_embedding (a tied embedding or output layer on a pipeline of several stages) in a
// bucket of its own. Follows megatron/core/optimizer/distrib_optimizer.py
// DistributedOptimizer._compute_per_buffer_param_layout and megatron/core/optimizer/
// param_layout.py pad_param_start / pad_bucket_end (pad_buckets_for_high_nccl_busbw off, its
// default).
//
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace ferry::models {

struct BufferParam {
  int64_t numel = 0;
  bool shared_embedding = false;
};

struct DistributedOptimizerBuffer {
  // [start, end) elements and bucket of each parameter, indexed as the parameters given.
  struct Slot {
    int64_t start = 0, end = 0;
    int bucket = 0;
  };
  std::vector<Slot> slots;
  std::vector<std::pair<int64_t, int64_t>> buckets;  // [start, end), ends padded
  int64_t numel = 0;                                 // the buffer's size: the last bucket's end
};

// The layout of `params`, given in the module's named_parameters() order (the buffer reverses it),
// for a data-parallel group of `dp` ranks. bucket_size 0: one bucket (Megatron's None).
Result<DistributedOptimizerBuffer> LayOutDistributedOptimizerBuffer(
    const std::vector<BufferParam>& params, int64_t bucket_size, int dp);

}  // namespace ferry::models
