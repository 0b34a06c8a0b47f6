// Which dtype changes the reshard planner plans, and in which dtype the bytes travel.
//
// A destination tensor may hold another dtype than its source tensor when the pair is a float
// conversion the executors run (core/base/float_convert.h): bf16, fp16 and fp32 among each other,
// and bf16/fp16/fp32 to fp8 e4m3 or e5m2 (per-tensor scale 1: a plain saturating cast). The
// planner then emits Convert ops where the dtype changes: a narrowing conversion on the sender
// (pack + convert into staging of the destination dtype, so fewer bytes cross the link), a
// widening one (or one between two dtypes of one size) on the receiver, and a same-rank copy as
// a Convert in place of the Copy.
#pragma once

#include "core/base/dtype.h"

namespace ferry {

// True when the planner converts `from` (a source tensor's dtype) to `to` (its destination's).
inline bool PlannerConverts(DType from, DType to) {
  auto wide = [](DType d) { return d == DType::kBF16 || d == DType::kFP16 || d == DType::kFP32; };
  return from != to && wide(from) && (wide(to) || IsFp8(to));
}

// The dtype in which elements of a `from` -> `to` tensor travel between ranks: `to` when it is
// smaller (the sender converts), else `from` (the receiver converts; also when from == to).
inline DType WireDType(DType from, DType to) {
  return DTypeSize(to) < DTypeSize(from) ? to : from;
}

}  // namespace ferry
