// Sane limits on layout, topology and plan input, checked (by name) before anything is sized,
// allocated or forked from it: a layout that validates fits in them, so later arithmetic on its
// sizes cannot overflow int64 and no loop runs per rank or per member beyond them.
#pragma once

#include <cstdint>

namespace ferry {

// Ranks a layout, topology or plan may name (ranks 0 .. kMaxRanks-1).
inline constexpr int kMaxRanks = 1 << 17;
// Bytes of any tensor, buffer, fragment span, byte offset or stride (1 PiB): far above any model,
// far below int64, so sums of a few of them cannot overflow.
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;
// Members of one tensor stack ("experts.[0:N].w").
inline constexpr int64_t kMaxStackMembers = int64_t{1} << 20;
// Bytes of a layout or topology file (the largest presets' layouts are tens of MiB as YAML).
inline constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;

}  // namespace ferry
