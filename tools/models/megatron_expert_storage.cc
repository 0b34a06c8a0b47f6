// Megatron-Core's expert weight storage (tools/models/megatron_expert_storage.h).
#include "tools/models/megatron_expert_storage.h"

namespace ferry::models {

namespace {

// Where one buffer keeps consecutive local experts: its name, the element stride from one expert
// to the next, and a member's element strides (a member is the checkpoint's [rows, cols] matrix).
struct Slot {
  std::string buffer;
  int64_t expert_stride = 0;
  int64_t row_stride = 0, col_stride = 0;
};

// fc1 holds gate then up (`up_at` elements after gate), fc2 holds down.
struct Geometry {
  Slot fc1, fc2;
  int64_t up_at = 0;
};

Geometry GeometryOf(MegatronExpertStorage storage, const std::string& prefix, int64_t local,
                    const ExpertShard& s) {
  const int64_t i = s.inter, h = s.hidden;
  const std::string n = std::to_string(local);
  switch (storage) {
    // megatron/core/transformer/moe/experts.py SequentialMLP: local_experts.<i> each an MLP
    case MegatronExpertStorage::kSequential:
      return {{prefix + "local_experts." + n + ".linear_fc1.weight", 2 * i * h, h, 1},
              {prefix + "local_experts." + n + ".linear_fc2.weight", h * i, i, 1},
              i * h};
    // megatron/core/extensions/transformer_engine.py TEGroupedLinear: weight<i> per expert
    case MegatronExpertStorage::kGrouped:
      return {{prefix + "linear_fc1.weight" + n, 2 * i * h, h, 1},
              {prefix + "linear_fc2.weight" + n, h * i, i, 1},
              i * h};
    // megatron/core/transformer/moe/experts.py TEGroupedMLP with moe_single_grouped_weight:
    // the per-expert weights stacked on dim 0 into one parameter
    case MegatronExpertStorage::kSingleGrouped:
      return {{prefix + "linear_fc1.weight", 2 * i * h, h, 1},
              {prefix + "linear_fc2.weight", h * i, i, 1},
              i * h};
    // megatron/core/transformer/moe/experts.py GroupedMLP (before 2caa681a1d): weight1.view(E,
    // hidden, -1) and weight2.view(E, -1, hidden), each expert's matrices transposed
    case MegatronExpertStorage::kLegacyGrouped:
      return {{prefix + "weight1", h * 2 * i, 1, 2 * i}, {prefix + "weight2", i * h, 1, h}, i};
  }
  return {};
}

bool SharesBuffer(MegatronExpertStorage storage) {
  return storage == MegatronExpertStorage::kSingleGrouped ||
         storage == MegatronExpertStorage::kLegacyGrouped;
}

// The gate/up rows (down columns) of shard s.shard: of experts [first, first + count) as a stack
// box ([E, rows, cols]), or of one member ([rows, cols]).
Box ShardBox(const ExpertShard& s, bool down, bool stack, int64_t first, int64_t count) {
  const int64_t lo = s.shard * s.inter, hi = lo + s.inter;
  Box b;
  int d = 0;
  b.ndim = stack ? 3 : 2;
  if (stack) {
    b.lo[0] = first;
    b.hi[0] = first + count;
    d = 1;
  }
  b.lo[d] = down ? 0 : lo;
  b.hi[d] = down ? s.hidden : hi;
  b.lo[d + 1] = down ? lo : 0;
  b.hi[d + 1] = down ? hi : s.hidden;
  return b;
}

// Experts [first, first + count) placed one after the other from the start of g's buffers.
void PlaceRun(Layout& out, const Geometry& g, const std::vector<ExpertTensorIds>& ids,
              const ExpertShard& s, int64_t first, int64_t count) {
  const int64_t e = s.elem;
  if (ids.size() == 1) {  // stacks: one fragment per projection spans the run
    const auto [gate, up, down] = ids[0];
    const std::array<int64_t, kMaxDims> fc1{g.fc1.expert_stride, g.fc1.row_stride, g.fc1.col_stride};
    const std::array<int64_t, kMaxDims> fc2{g.fc2.expert_stride, g.fc2.row_stride, g.fc2.col_stride};
    out.PlaceFragment(gate, ShardBox(s, false, true, first, count), s.rank, g.fc1.buffer, 0, fc1);
    out.PlaceFragment(up, ShardBox(s, false, true, first, count), s.rank, g.fc1.buffer, g.up_at * e, fc1);
    out.PlaceFragment(down, ShardBox(s, true, true, first, count), s.rank, g.fc2.buffer, 0, fc2);
    return;
  }
  const std::array<int64_t, kMaxDims> fc1{g.fc1.row_stride, g.fc1.col_stride};
  const std::array<int64_t, kMaxDims> fc2{g.fc2.row_stride, g.fc2.col_stride};
  for (int64_t le = 0; le < count; ++le) {
    const auto [gate, up, down] = ids[static_cast<size_t>(first + le)];
    const int64_t at1 = le * g.fc1.expert_stride * e, at2 = le * g.fc2.expert_stride * e;
    out.PlaceFragment(gate, ShardBox(s, false, false, 0, 0), s.rank, g.fc1.buffer, at1, fc1);
    out.PlaceFragment(up, ShardBox(s, false, false, 0, 0), s.rank, g.fc1.buffer, at1 + g.up_at * e, fc1);
    out.PlaceFragment(down, ShardBox(s, true, false, 0, 0), s.rank, g.fc2.buffer, at2, fc2);
  }
}

}  // namespace

const char* ExpertStorageName(MegatronExpertStorage storage) {
  switch (storage) {
    case MegatronExpertStorage::kSequential: return "sequential";
    case MegatronExpertStorage::kGrouped: return "grouped";
    case MegatronExpertStorage::kSingleGrouped: return "single_grouped";
    case MegatronExpertStorage::kLegacyGrouped: return "legacy_grouped";
  }
  return "?";
}

Result<MegatronExpertStorage> ParseExpertStorage(const std::string& name) {
  for (MegatronExpertStorage s :
       {MegatronExpertStorage::kSequential, MegatronExpertStorage::kGrouped,
        MegatronExpertStorage::kSingleGrouped, MegatronExpertStorage::kLegacyGrouped}) {
    if (name == ExpertStorageName(s)) return s;
  }
  return InvalidArgument("bad value '" + name +
                         "' for experts: expected sequential, grouped, single_grouped or "
                         "legacy_grouped");
}

void PlaceMegatronExperts(Layout& out, MegatronExpertStorage storage, const std::string& prefix,
                          const std::vector<ExpertTensorIds>& ids, const ExpertShard& s) {
  if (SharesBuffer(storage)) {
    PlaceRun(out, GeometryOf(storage, prefix, 0, s), ids, s, s.first, s.count);
    return;
  }
  for (int64_t le = 0; le < s.count; ++le) {
    PlaceRun(out, GeometryOf(storage, prefix, le, s), ids, s, s.first + le, 1);
  }
}

}  // namespace ferry::models
