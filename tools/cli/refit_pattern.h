// The deterministic test pattern `ferry run` fills source fragments with and checks destination
// fragments against: element i of tensor t holds the low DTypeSize bytes of PatternWord(t, i),
// where i is the element's row-major index in the tensor's global shape and t is identified by its
// name. Replicas of one element therefore agree on every rank, and any misplaced, missing or
// duplicated element shows up as a mismatch. A destination tensor of another dtype than its
// source holds the source's pattern converted (VerifyPattern's `source`), and one the destination
// stores through an element function (vLLM's Mamba A = -exp(A_log), core/base/element_fn.h)
// holds that function of the source's pattern, in its stored dtype (StoredForms).
//
// Pure functions over caller-owned memory; thread-safe for disjoint buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/element_fn.h"
#include "core/base/status.h"
#include "core/layout/layout.h"
#include "tools/cli/pattern_word.h"

namespace ferry::cli {

// Host memory of one side's buffers on one rank: buffers[b] points at layout.buffers[b]'s bytes
// when that buffer lives on `rank`, and may be null otherwise.
struct RankBuffers {
  int rank = 0;
  std::vector<char*> buffers;
};

// Writes the pattern into every fragment of `layout` held by `buffers.rank`. Bytes outside
// fragments (padding, gaps) are left as they are. With `destination`, tensors it stores
// block-scaled get FinitePatternWord (block_scaled_pattern.h).
Status FillPattern(const Layout& layout, const RankBuffers& buffers, const Layout* destination = nullptr);

// Checks every element of every fragment of `layout` held by `buffers.rank`. Returns the bytes
// checked, or Internal (a delivery bug) naming the rank, buffer, tensor, element coordinates,
// expected and actual bytes of the first mismatch (and how many elements mismatched in that
// fragment). With `source` (the layout FillPattern filled), a tensor that `source` holds in
// another dtype is expected to hold the source pattern converted by the CPU reference
// (core/base/float_convert.h), as a refit that converts delivers it, a tensor stored through an
// element function that function of it (StoredForms; bit for bit against the host's math), and block-scaled buffers
// (and their scales) hold the source's pattern quantized (VerifyBlockScaled; `source` required).
Result<int64_t> VerifyPattern(const Layout& layout, const RankBuffers& buffers,
                              const Layout* source = nullptr);

// How each tensor of `layout` is stored: its dtype, or for a tensor with a StoredTransform the
// stored dtype and the transform's element function (kNone for one that is not a function, such
// as block-scaled fp8).
struct StoredForm {
  DType dtype = DType::kBF16;
  ElementFn fn = ElementFn::kNone;
};
std::vector<StoredForm> StoredForms(const Layout& layout);

// The dtype the pattern of destination tensor `t` was written in: `source`'s tensor of that name's,
// else its own.
DType PatternDType(const TensorSpec& t, const Layout* source);

// The checksum (core/base/checksum_term.h) each fragment of `layout` held by `rank` has when it
// holds the pattern (converted from `source`'s dtype as VerifyPattern expects), one per such
// fragment in layout order, computed from the layout alone: no buffer is read.
std::vector<uint64_t> PatternChecksums(const Layout& layout, int rank, const Layout* source = nullptr);

}  // namespace ferry::cli
