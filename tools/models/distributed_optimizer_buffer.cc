// Megatron's distributed-optimizer buffer layout (tools/models/distributed_optimizer_buffer.h).
#include "tools/models/distributed_optimizer_buffer.h"

#include <numeric>
#include <string>

#include "core/layout/limits.h"

namespace ferry::models {

namespace {

int64_t PadTo(int64_t index, int64_t divisor) { return (index + divisor - 1) / divisor * divisor; }

}  // namespace

Result<DistributedOptimizerBuffer> LayOutDistributedOptimizerBuffer(
    const std::vector<BufferParam>& params, int64_t bucket_size, int dp) {
  if (dp < 1 || bucket_size < 0) {
    return InvalidArgument("distributed optimizer buffer: dp must be positive and bucket_size "
                           "non-negative");
  }
  // megatron/core/optimizer/param_layout.py bucket_end_divisor: lcm(dp, 128)
  const int64_t bucket_divisor = std::lcm(int64_t{dp}, int64_t{128});
  DistributedOptimizerBuffer out;
  out.slots.resize(params.size());
  int64_t start = 0, bucket_start = 0, end = 0;
  bool bucket_open = false;
  auto finalize = [&](int64_t bucket_end) {
    out.buckets.push_back({bucket_start, PadTo(bucket_end, bucket_divisor)});
    bucket_start = out.buckets.back().second;
    bucket_open = false;
  };
  for (size_t k = params.size(); k-- > 0;) {
    const BufferParam& p = params[k];
    if (p.numel < 0 || p.numel > kMaxBytes) {
      return InvalidArgument("distributed optimizer buffer: parameter of " +
                             std::to_string(p.numel) + " elements");
    }
    start = PadTo(start, 64);  // pad_param_start: 64-element alignment
    if (p.shared_embedding && bucket_open) {
      finalize(start);
      start = bucket_start;
    }
    end = start + p.numel;
    out.slots[k] = {start, end, static_cast<int>(out.buckets.size())};
    bucket_open = true;
    if ((bucket_size > 0 && end - bucket_start >= bucket_size) || p.shared_embedding) {
      finalize(end);
      start = bucket_start;
    } else {
      start = end;
    }
    if (start > kMaxBytes) return InvalidArgument("distributed optimizer buffer over kMaxBytes");
  }
  if (bucket_open) finalize(end);
  out.numel = out.buckets.empty() ? 0 : out.buckets.back().second;
  return out;
}

}  // namespace ferry::models
