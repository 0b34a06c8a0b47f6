// Checks that the framework specs share when they are resolved against a model (internal to
// tools/models): divisibility of a model dimension by a parallel size, the tensor-parallel
// divisibility of attention and dense MLPs, and a rank count within kMaxRanks. Each returns
// InvalidArgument naming the dimension and the size.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "tools/models/presets.h"

namespace ferry::models {

// Ok when `by` > 0 divides `n`; otherwise "<what> <n> is not divisible by <by_what> <by>".
Status CheckDivides(const std::string& what, int64_t n, const std::string& by_what, int64_t by);

// Whether a layer of `c` holds a dense MLP (a decoder layer without experts, a Nemotron-H MLP).
bool HasDenseMlp(const ModelConfig& c);

// Divisibility shared by every framework's tensor-parallel attention heads, dense MLPs, shared
// experts and Mamba mixers over `tp` ranks.
Status CheckTensorParallel(const ModelConfig& c, int tp);

// A framework's ranks (the product of its parallel sizes) within kMaxRanks, checked in int64
// before anything multiplies them as int or builds a layout of that many ranks.
Status CheckWorld(const std::string& what, int64_t world);

}  // namespace ferry::models
