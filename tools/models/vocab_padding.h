// Vocabulary padding: how many rows each framework gives its vocab-parallel embedding and output
// layer, given the checkpoint's vocabulary and the tensor-parallel size. Every framework then
// splits the padded rows into tp equal contiguous blocks (rank i holds rows
// [i*padded/tp, (i+1)*padded/tp)), so the padding rows, past the checkpoint's vocabulary, sit at
// the end of the last blocks; a rank may hold padding only.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/base/status.h"

namespace ferry::models {

// Megatron's padded vocabulary. pad: Megatron-LM's --make-vocab-size-divisible-by rule, the vocab
// rounded up to a multiple of divisible_by * tp; !pad: Megatron-Bridge's should_pad_vocab=False,
// the vocab itself, which Megatron-Core's vocab-parallel embedding requires tp to divide (its
// reason is returned otherwise).
Result<int64_t> MegatronPaddedVocab(int64_t vocab, int tp, int divisible_by, bool pad);

// vLLM's padded vocabulary: the vocab rounded up to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE,
// no LoRA-added tokens), which tp must divide (vLLM's reason is returned otherwise).
Result<int64_t> VllmPaddedVocab(int64_t vocab, int tp);

// SGLang's padded vocabulary over `ranks` (the TP or attention-TP group that splits it): a
// multiple of 64, or of 64 * ranks when that one does not divide by the ranks. Never refused.
Result<int64_t> SglangPaddedVocab(int64_t vocab, int ranks);

}  // namespace ferry::models
